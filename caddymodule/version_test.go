package caddymodule

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBinaryVersionAndHelp: `idemgate version` names idemgate's version and
// Caddy's, and the idempotency subcommands' help names idemgate, not caddy.
func TestBinaryVersionAndHelp(t *testing.T) {
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

	for _, args := range [][]string{
		{"help", "idempotency"},
		{"idempotency", "inspect", "--help"},
		{"idempotency", "send", "--help"},
		{"idempotency", "keygen", "--help"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		usage := regexp.MustCompile(`(?m)^  (\S+) idempotency\b`).FindSubmatch(out)
		if usage == nil || string(usage[1]) != "idemgate" {
			t.Errorf("%v: the usage line does not start with `idemgate idempotency`:\n%s", args, out)
		}
		if regexp.MustCompile(`\bcaddy idempotency\b`).Match(out) {
			t.Errorf("%v: help says `caddy idempotency`:\n%s", args, out)
		}
	}
}
