package stripe

import (
	"errors"
	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.stripe), with its own settings.
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

// Bill is what reconciliation with its bill allows for.
func (*Module) Bill() *bill.Traits { return Bill }

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
	_ guest.Resigner      = (*Module)(nil)
	_ guest.SecretHolder  = (*Module)(nil)
)

// Resends: Stripe resends an event to a webhook endpoint.
func (*Module) Resends() bool { return true }

// ReadAPIConfig reads catch_up's api_key (a restricted key with Events:
// Read, and Write for resend) and endpoint (we_…, where a resend goes).
func (*Module) ReadAPIConfig(r guest.Route, creds map[string]string, cfg *keying.APIConfig) error {
	if err := guest.UnknownCredential("stripe", creds, "api_key", "endpoint"); err != nil {
		return err
	}
	key, err := r.Secret("catch_up: api_key", creds["api_key"])
	if err != nil {
		return err
	}
	if key == "" {
		return errors.New("catch_up: stripe needs api_key (a restricted key with Events: Read, and Write for resend)")
	}
	if cfg.Merchant, err = r.Secret("catch_up: endpoint", creds["endpoint"]); err != nil {
		return err
	}
	cfg.Key = []byte(key)
	return nil
}
