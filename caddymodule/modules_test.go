package caddymodule

import (
	"bytes"
	"testing"

	// The handler's end-to-end tests reach the admin API (inspect, purge,
	// /load reloads) and the CLI through the real modules, as a built
	// binary does.
	_ "github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// runCLI runs `idemgate idempotency <args>` in this process and returns
// its standard output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var errOut bytes.Buffer
	return gatewaytest.RunCLI(t, &errOut, args...)
}
