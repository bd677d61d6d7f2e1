package alipay

import (
	"errors"
	"fmt"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.alipay), with its own settings.
type Module struct {
	// PublicKey is a PEM file: Alipay's public key.
	PublicKey string `json:"public_key,omitempty"`
	// AppIDs pins notifications to these app_ids; empty accepts any.
	AppIDs []string `json:"app_id,omitempty"`
	// Return is what Alipay's signed browser return is on this route:
	// "business" (the order's paid event, shared with the notify),
	// "display" (a page, its own key) or "refuse" (default: 405).
	Return string `json:"return,omitempty"`

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
	if m.PublicKey != "" {
		if cfg.PublicKey, err = r.PEM("public_key", m.PublicKey); err != nil {
			return nil, err
		}
	}
	m.merchants = nil
	for _, id := range m.AppIDs {
		m.merchants = append(m.merchants, r.Resolve(id))
	}
	cfg.AppIDs = m.merchants
	cfg.Return = m.Return
	return New(cfg)
}

// UnmarshalSubdirective reads one of the platform's settings from the
// route's Caddyfile block.
func (m *Module) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	switch name {
	case "public_key":
		return true, cfparse.OneArg(d, &m.PublicKey)
	case "app_id":
		return true, cfparse.ListArg(d, &m.AppIDs)
	case "return":
		if err := cfparse.OneArg(d, &m.Return); err != nil {
			return true, err
		}
		switch m.Return {
		case "business", "display", "refuse":
			return true, nil
		}
		return true, d.Errf("return: want business, display or refuse (what Alipay's signed browser return is on this route), got %q", m.Return)
	}
	return false, nil
}

// Merchants are the pinned ids as Build resolved them.
func (m *Module) Merchants() []string { return m.merchants }

// Sender signs the platform's test notifications (send, keygen).
func (*Module) Sender() *keying.Sender { return sender }

// ReadAPI builds the client of the platform's own API that finds
// payments whose notification never arrived (nil until it has one).
func (*Module) ReadAPI() keying.ReadAPI { return NewReadAPI }

// Interface guards
var (
	_ guest.Module        = (*Module)(nil)
	_ guest.Subdirectives = (*Module)(nil)
	_ guest.Biller        = (*Module)(nil)
	_ guest.Signer        = (*Module)(nil)
	_ guest.Reader        = (*Module)(nil)
	_ guest.Pinner        = (*Module)(nil)
)

// Resends: Alipay has no resend; it answers alipay.trade.query by order.
func (*Module) Resends() bool { return false }

// ReadAPIConfig reads catch_up's app_private_key (the application's
// private key, a PEM file); the app is the route's one app_id, and
// Alipay's answers are verified with the route's public_key.
func (m *Module) ReadAPIConfig(r guest.Route, creds map[string]string, cfg *keying.APIConfig) error {
	if err := guest.UnknownCredential("alipay", creds, "app_private_key"); err != nil {
		return err
	}
	if len(m.AppIDs) != 1 {
		return fmt.Errorf("catch_up: alipay asks for one app: the route must pin exactly one app_id (it pins %d)", len(m.AppIDs))
	}
	cfg.Merchant = r.Resolve(m.AppIDs[0])
	if creds["app_private_key"] == "" {
		return errors.New("catch_up: alipay needs app_private_key <pem file> (the application's private key)")
	}
	var err error
	if cfg.Key, err = r.PEM("catch_up: app_private_key", creds["app_private_key"]); err != nil {
		return err
	}
	if m.PublicKey == "" {
		return errors.New("catch_up: alipay needs the route's public_key (Alipay's), to verify its answers")
	}
	cfg.PlatformKey, err = r.PEM("public_key", m.PublicKey)
	return err
}
