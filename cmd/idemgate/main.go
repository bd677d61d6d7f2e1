// Command idemgate is Caddy with its standard modules and the idempotency
// gateway (every module the module root registers: the handler, the
// console, the admin API and the CLI): `idemgate run --config Caddyfile`,
// `idemgate list-modules`, `idemgate version`, and `idemgate idempotency
// inspect|list|in-flight|redeliver|purge|deliveries|pause|resume|send|keygen`.
package main

import (
	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/idemgate/idemgate"
)

func main() {
	// Help and usage lines name this binary, not "caddy".
	caddy.CustomBinaryName = "idemgate"
	// `idemgate version` (and --version) name idemgate's version, then
	// Caddy's, which Caddy appends to CustomVersion.
	caddy.CustomVersion = "idemgate " + idemgate.Version() + ", caddy"
	caddycmd.Main()
}
