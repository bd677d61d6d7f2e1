package console

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// docCaddyfiles are the Caddyfiles of the repository's documents and
// examples that mount a console: each fenced block of a Markdown file, and
// each example Caddyfile, named by where it is.
func docCaddyfiles(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	mds, _ := filepath.Glob("../../docs/*.md")
	mds = append(mds, "../../README.md")
	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(b), "```")
		for i := 1; i < len(parts); i += 2 {
			_, body, _ := strings.Cut(parts[i], "\n") // the fence's language
			if mountsConsole(body) {
				found[filepath.Base(md)+", block "+strconv.Itoa(i/2+1)] = body
			}
		}
	}
	cfs, _ := filepath.Glob("../../examples/*.Caddyfile")
	cfs = append(cfs, "../../Caddyfile.example")
	for _, cf := range cfs {
		b, err := os.ReadFile(cf)
		if err != nil {
			t.Fatal(err)
		}
		if mountsConsole(string(b)) {
			found[filepath.Base(cf)] = string(b)
		}
	}
	return found
}

// TestDocsShowNoOpenConsole: no document or example mounts a console with
// no authentication of its own on a site that listens beyond loopback or
// takes notifications (the runbook once put one beside its Alipay and
// Stripe routes, where anyone reaching the notification port could send
// Host: localhost and redeliver). Each Caddyfile is adapted as Caddy
// would, and each site's servers judged as the console's Provision judges
// them (the warning `validate` gives).
func TestDocsShowNoOpenConsole(t *testing.T) {
	docs := docCaddyfiles(t)
	if len(docs) < 2 {
		t.Fatalf("found %d Caddyfiles with a console in the docs, want at least the console section's and the runbook's", len(docs))
	}
	for where, cf := range docs {
		out, _, err := gatewaytest.CaddyfileAdapter().Adapt([]byte(cf), nil)
		if err != nil {
			// A fragment: a site body, on a site the reader picks.
			out, _, err = gatewaytest.CaddyfileAdapter().Adapt([]byte("http://:8080 {\n"+cf+"\n}\n"), nil)
		}
		if err != nil {
			t.Errorf("%s: does not adapt: %v\n%s", where, err, cf)
			continue
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Servers map[string]*caddyhttp.Server `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		consoles := 0
		for name, srv := range cfg.Apps.HTTP.Servers {
			for i := range srv.Routes {
				site := &srv.Routes[i]
				if !hasConsole(site) {
					continue
				}
				consoles++
				if why := exposure(srv.Listen, srv.Routes, site); why != "" {
					t.Errorf("%s: server %s (listen %v) %s, and mounts a console with no authentication of its own:\n%s",
						where, name, srv.Listen, why, cf)
				}
			}
		}
		if consoles == 0 {
			t.Errorf("%s: no console found in its adapted config", where)
		}
	}
}

// mountsConsole tells whether a Caddyfile has the directive on a line.
func mountsConsole(cf string) bool {
	for _, line := range strings.Split(cf, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "idempotency_console" {
			return true
		}
	}
	return false
}

func hasConsole(rt *caddyhttp.Route) bool {
	for _, raw := range rt.HandlersRaw {
		if rawHasHandler(raw, "idempotency_console") {
			return true
		}
	}
	return false
}

// TestExposure: what the console's Provision warns about, on adapted
// Caddyfiles.
func TestExposure(t *testing.T) {
	notify := "\thandle /notify {\n\t\tidempotency {\n\t\t\tkey k:{idempotency.form.a}\n\t\t\tstore memory\n\t\t}\n\t\treverse_proxy 127.0.0.1:9\n\t}\n"
	console := "\troute /console/* {\n\t\tidempotency_console\n\t}\n"
	authed := "\troute /console/* {\n\t\tbasic_auth {\n\t\t\tops $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG\n\t\t}\n\t\tidempotency_console\n\t}\n"
	for _, tc := range []struct{ name, cf, want string }{
		{"the old runbook: beside notifications, every interface", "http://localhost:8081 {\n" + notify + console + "}\n", "listens beyond loopback and takes notifications"},
		{"a site of its own, no bind", "http://localhost:2020 {\n" + console + "}\n", "listens beyond loopback"},
		{"bound to loopback, beside notifications", "http://:2020 {\n\tbind 127.0.0.1\n" + notify + console + "}\n", "takes notifications"},
		{"a site of its own bound to loopback", "http://localhost:2020 {\n\tbind 127.0.0.1 ::1\n" + console + "}\nhttp://:8081 {\n" + notify + "}\n", ""},
		{"behind basic_auth, beside notifications", "http://:8081 {\n" + notify + authed + "}\n", ""},
		{"a unix socket", "http://localhost {\n\tbind unix//run/idemgate.sock\n" + console + "}\n", ""},
	} {
		out, _, err := gatewaytest.CaddyfileAdapter().Adapt([]byte(tc.cf), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Servers map[string]*caddyhttp.Server `json:"servers"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, srv := range cfg.Apps.HTTP.Servers {
			for i := range srv.Routes {
				if hasConsole(&srv.Routes[i]) {
					got = exposure(srv.Listen, srv.Routes, &srv.Routes[i])
				}
			}
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q\n%s", tc.name, got, tc.want, out)
		}
	}
}
