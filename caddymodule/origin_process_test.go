package caddymodule

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestProvisionErrorSaysWhere: a route whose secret cannot be read stops
// `validate` and `run` of the built binary with an error that names the
// site, the route's path (its own matcher, or the `handle` around it),
// the Caddyfile's line and the subdirective, not only Caddy's chain of
// module names, and never the secret's value.
func TestProvisionErrorSaysWhere(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	bin := gatewayBinary(t)
	for _, c := range []struct {
		name, route string
		want        []string
	}{
		{"own matcher", "\tidempotency /stripe/notify {\n\t\tplatform stripe\n\t\tsecret {env.IDEMGATE_TEST_UNSET_SECRET}\n\t\tstore memory\n\t}\n\trespond ok\n",
			[]string{"/stripe/notify (", "secret: {env.IDEMGATE_TEST_UNSET_SECRET} is empty"}},
		{"inside handle", "\thandle /alipay/notify {\n\t\tidempotency {\n\t\t\tplatform alipay\n\t\t\tpublic_key /nonexistent/alipay_public_key.pem\n\t\t\tstore memory\n\t\t}\n\t\trespond success\n\t}\n",
			[]string{"handle /alipay/notify (", "public_key: file /nonexistent/alipay_public_key.pem does not exist"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cf := filepath.Join(dir, "Caddyfile")
			good := "http://127.0.0.1:" + itoa(freePort(t))
			bad := "http://pay.localhost:" + itoa(freePort(t))
			text := "{\n\tadmin off\n\tpersist_config off\n}\n" +
				good + " {\n\tidempotency {\n\t\tkey k:{idempotency.form.a}\n\t\tstore memory\n\t}\n\trespond ok\n}\n" +
				bad + " {\n" + c.route + "}\n"
			if err := os.WriteFile(cf, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			// The line the route's idempotency directive is on.
			line := 0
			for i, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "idempotency") {
					line = i + 1 // the last one: the broken site's
				}
			}
			want := append([]string{"idempotency route " + bad + " ", cf + ":" + itoa(line) + ")"}, c.want...)
			for _, verb := range []string{"validate", "run"} {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, bin, verb, "--config", cf, "--adapter", "caddyfile")
				cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"),
					"XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
				out, err := cmd.CombinedOutput()
				timedOut := ctx.Err() != nil
				cancel()
				if err == nil || timedOut {
					t.Fatalf("%s: want it refused at start, got %v\n%s", verb, err, out)
				}
				for _, w := range want {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s: the error does not say %q:\n%s", verb, w, out)
					}
				}
				if strings.Contains(string(out), good+" ") {
					t.Errorf("%s: the error names the site that is fine:\n%s", verb, out)
				}
			}
		})
	}
}
