// Command idemgate is Caddy with its standard modules and the idempotency
// gateway: `idemgate run --config Caddyfile`, `idemgate list-modules`,
// `idemgate idempotency inspect|purge|in-flight`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/idemgate/idemgate/caddymodule"
)

func main() {
	caddycmd.Main()
}
