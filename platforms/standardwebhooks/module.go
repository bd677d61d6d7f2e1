package standardwebhooks

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.standard_webhooks), with its own settings.
type Module struct {
	// SecretSetting is the signing secret (`secret`), and the re-signer
	// a route with it gets.
	guest.SecretSetting
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: guest.ID(Preset.Name), New: func() caddy.Module { return new(Module) }}
}

// Preset describes the platform.
func (*Module) Preset() *keying.Preset { return Preset }

// Build returns the route's check, configured with the module's settings.
func (m *Module) Build(r guest.Route) (keying.Platform, error) {
	secret, err := m.ResolveSecret(r, resigner)
	if err != nil {
		return nil, err
	}
	return New(Config{Secret: secret, NoVerify: r.NoVerify, Tolerance: r.Tolerance})
}

// Sender signs the platform's test notifications (send, keygen).
func (*Module) Sender() *keying.Sender { return sender }

// Interface guards
var (
	_ guest.Module        = (*Module)(nil)
	_ guest.Subdirectives = (*Module)(nil)
	_ guest.Signer        = (*Module)(nil)
	_ guest.Resigner      = (*Module)(nil)
	_ guest.SecretHolder  = (*Module)(nil)
)
