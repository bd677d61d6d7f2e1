package generic

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.generic), with its own settings.
type Module struct{}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: guest.ID(Name), New: func() caddy.Module { return new(Module) }}
}

// Preset describes the platform.
func (*Module) Preset() *keying.Preset { return Preset }

// Build returns the route's check, configured with the module's settings.
func (*Module) Build(guest.Route) (keying.Platform, error) { return Generic{}, nil }

// Interface guards
var (
	_ guest.Module = (*Module)(nil)
)
