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

// validateCaddyfile runs `idemgate validate` on the Caddyfile text and
// returns its output.
func validateCaddyfile(t *testing.T, text string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cf := filepath.Join(home, "Caddyfile")
	if err := os.WriteFile(cf, []byte("{\n\tadmin off\n\tpersist_config off\n}\n"+text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gatewayBinary(t), "validate", "--config", cf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestValidateWarnsOpenConsole: `idemgate validate` warns (and still
// validates) when a console with no authentication of its own sits on a
// server that listens beyond loopback or takes notifications: the
// runbook's old layout, with the console beside the notification routes
// on every interface, let anyone who reached the notification port send
// Host: localhost and redeliver. A console on a site of its own bound to
// loopback, or behind basic_auth, gets no warning.
func TestValidateWarnsOpenConsole(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	const hash = "$2a$04$ZbIBWrioS.0jm.rwMAFToeZMsA7mXDFbSvarWA7qEDzF14EBS3v8." // "s3cret"
	p1, p2 := itoa(freePort(t)), itoa(freePort(t))
	notify := "\thandle /alipay/notify {\n\t\tidempotency {\n\t\t\tkey k:{idempotency.form.out_trade_no}\n\t\t\tstore memory\n\t\t}\n\t\treverse_proxy 127.0.0.1:9\n\t}\n"
	console := "\troute /console/* {\n\t\tidempotency_console\n\t}\n"
	const warning = "idempotency_console with no authentication of its own on a server that "
	for _, tc := range []struct{ name, cf, want string }{
		{"beside notifications, every interface", "http://localhost:" + p1 + " {\n" + notify + console + "}\n",
			"listens beyond loopback and takes notifications"},
		{"a site of its own without bind", "http://localhost:" + p2 + " {\n" + console + "}\n", "listens beyond loopback"},
		{"bound to loopback beside notifications", "http://:" + p1 + " {\n\tbind 127.0.0.1\n" + notify + console + "}\n", "takes notifications"},
		{"a site of its own bound to loopback", "http://:" + p1 + " {\n" + notify + "}\nhttp://localhost:" + p2 + " {\n\tbind 127.0.0.1\n" + console + "}\n", ""},
		{"behind basic_auth beside notifications", "http://:" + p1 + " {\n" + notify +
			"\troute /console/* {\n\t\tbasic_auth {\n\t\t\tops " + string(hash) + "\n\t\t}\n\t\tidempotency_console\n\t}\n}\n", ""},
	} {
		out, err := validateCaddyfile(t, tc.cf)
		if err != nil || !strings.Contains(out, "Valid configuration") {
			t.Errorf("%s: validate: %v\n%s", tc.name, err, out)
			continue
		}
		var got string
		for _, line := range strings.Split(out, "\n") {
			if _, rest, ok := strings.Cut(line, warning); ok && strings.Contains(line, `"level":"warn"`) {
				got, _, _ = strings.Cut(rest, ":")
			}
		}
		if got != tc.want {
			t.Errorf("%s: warned %q, want %q\n%s", tc.name, got, tc.want, out)
		}
	}
}
