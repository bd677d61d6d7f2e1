package standardwebhooks

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.standard_webhooks), with its own settings.
type Module struct {
	// Secret is the signing secret. {env.*} and {file.*} are resolved once at start.
	Secret string `json:"secret,omitempty"`
	// resign signs a redelivered copy afresh; set by Build.
	resign keying.Resigner
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: guest.ID(Preset.Name), New: func() caddy.Module { return new(Module) }}
}

// Preset describes the platform.
func (*Module) Preset() *keying.Preset { return Preset }

// Build returns the route's check, configured with the module's settings.
func (m *Module) Build(r guest.Route) (keying.Platform, error) {
	var err error
	cfg := Config{NoVerify: r.NoVerify, Tolerance: r.Tolerance}
	if cfg.Secret, err = r.Secret("secret", m.Secret); err != nil {
		return nil, err
	}
	m.resign = nil
	if cfg.Secret != "" && !cfg.NoVerify {
		m.resign = resigner(cfg.Secret)
	}
	return New(cfg)
}

// UnmarshalSubdirective reads one of the platform's settings from the
// route's Caddyfile block.
func (m *Module) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	switch name {
	case "secret":
		return true, cfparse.OneArg(d, &m.Secret)
	}
	return false, nil
}

// HasSecret tells whether the route sets the platform's secret.
func (m *Module) HasSecret() bool { return m.Secret != "" }

// Resigner signs a redelivered copy afresh with the route's secret; nil
// without one or under `verify off`.
func (m *Module) Resigner() keying.Resigner { return m.resign }

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
