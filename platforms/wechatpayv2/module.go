package wechatpayv2

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.wechatpay_v2), with its own settings.
type Module struct {
	// Secret is the v2 API key. {env.*} and {file.*} are resolved once at start.
	Secret string `json:"secret,omitempty"`
	// MchIDs pins notifications to these merchants (mch_id); empty
	// accepts any.
	MchIDs []string `json:"mchid,omitempty"`

	// merchants are the pinned ids as resolved by Build.
	merchants []string
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: guest.ID(Preset.Name), New: func() caddy.Module { return new(Module) }}
}

// Preset describes the platform.
func (*Module) Preset() *keying.Preset { return Preset }

// Bill is what reconciliation with its bill allows for.
func (*Module) Bill() *bill.Traits { return Bill }

// Build returns the route's check, configured with the module's settings.
func (m *Module) Build(r guest.Route) (keying.Platform, error) {
	var err error
	cfg := Config{NoVerify: r.NoVerify}
	if cfg.Secret, err = r.Secret("secret", m.Secret); err != nil {
		return nil, err
	}
	m.merchants = nil
	for _, id := range m.MchIDs {
		m.merchants = append(m.merchants, r.Resolve(id))
	}
	cfg.MchIDs = m.merchants
	return New(cfg)
}

// UnmarshalSubdirective reads one of the platform's settings from the
// route's Caddyfile block.
func (m *Module) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	switch name {
	case "secret":
		return true, cfparse.OneArg(d, &m.Secret)
	case "mchid":
		return true, cfparse.ListArg(d, &m.MchIDs)
	}
	return false, nil
}

// HasSecret tells whether the route sets the platform's secret.
func (m *Module) HasSecret() bool { return m.Secret != "" }

// Merchants are the pinned ids as Build resolved them.
func (m *Module) Merchants() []string { return m.merchants }

// Sender signs the platform's test notifications (send, keygen).
func (*Module) Sender() *keying.Sender { return sender }

// Interface guards
var (
	_ guest.Module        = (*Module)(nil)
	_ guest.Subdirectives = (*Module)(nil)
	_ guest.Biller        = (*Module)(nil)
	_ guest.Signer        = (*Module)(nil)
	_ guest.Pinner        = (*Module)(nil)
	_ guest.SecretHolder  = (*Module)(nil)
)
