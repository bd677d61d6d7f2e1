package caddymodule

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestBinaryVersionAndHelp: `idemgate version` names idemgate's version and
// Caddy's, and the idempotency subcommands' help names idemgate, not caddy.
func TestBinaryVersionAndHelp(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	bin := gatewayBinary(t)
	caddyVersion, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/caddyserver/caddy/v2").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	want := regexp.MustCompile(`^idemgate (v\S+|\(devel\)( \S+)?), caddy ` + regexp.QuoteMeta(strings.TrimSpace(string(caddyVersion))) + `\b`)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !want.Match(out) {
			t.Errorf("%v printed %q, want it to match %s", args, out, want)
		}
	}

	for _, tc := range []struct {
		args  []string
		usage string
	}{
		{[]string{"help", "idempotency"}, "idemgate idempotency [command]"},
		{[]string{"idempotency", "inspect", "--help"}, "idemgate idempotency inspect <key>"},
		{[]string{"idempotency", "send", "--help"}, "idemgate idempotency send --platform <name> --url <url>"},
		{[]string{"idempotency", "keygen", "--help"}, "idemgate idempotency keygen --platform <name|all>"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), "Usage:\n  "+tc.usage) {
			t.Errorf("%v: no usage line %q:\n%s", tc.args, tc.usage, out)
		}
		if regexp.MustCompile(`\bcaddy idempotency\b`).Match(out) {
			t.Errorf("%v: help says `caddy idempotency`:\n%s", tc.args, out)
		}
	}
}
