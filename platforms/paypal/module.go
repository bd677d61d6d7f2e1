package paypal

import (
	"errors"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

// Module is the platform as the idempotency handler loads it
// (http.handlers.idempotency.platforms.paypal), with its own settings.
type Module struct {
	// WebhookID is PayPal's webhook subscription id.
	WebhookID string `json:"webhook_id,omitempty"`
	// Certificates are PEM files: PayPal's signing certificate.
	Certificates []string `json:"certificates,omitempty"`
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
	cfg := Config{NoVerify: r.NoVerify, Tolerance: r.Tolerance}
	if cfg.WebhookID, err = r.Secret("webhook_id", m.WebhookID); err != nil {
		return nil, err
	}
	for _, c := range m.Certificates {
		pem, err := r.PEM("certificate", c)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = append(cfg.Certificates, pem)
	}
	if r.Remember != nil {
		cfg.TransmissionLog = transmissionLog(r.Remember)
	}
	return New(cfg)
}

// UnmarshalSubdirective reads one of the platform's settings from the
// route's Caddyfile block.
func (m *Module) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	switch name {
	case "webhook_id":
		return true, cfparse.OneArg(d, &m.WebhookID)
	case "certificate":
		return true, cfparse.ListArg(d, &m.Certificates)
	}
	return false, nil
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
)

// Resends: PayPal resends a webhook event to the route's webhook.
func (*Module) Resends() bool { return true }

// ReadAPIConfig reads catch_up's client_id and secret (the REST app's);
// a resend goes to the route's webhook_id.
func (m *Module) ReadAPIConfig(r guest.Route, creds map[string]string, cfg *keying.APIConfig) error {
	if err := guest.UnknownCredential("paypal", creds, "client_id", "secret"); err != nil {
		return err
	}
	id, err := r.Secret("catch_up: client_id", creds["client_id"])
	if err != nil {
		return err
	}
	secret, err := r.Secret("catch_up: secret", creds["secret"])
	if err != nil {
		return err
	}
	if id == "" || secret == "" {
		return errors.New("catch_up: paypal needs client_id and secret (the REST app's)")
	}
	if cfg.Merchant, err = r.Secret("webhook_id", m.WebhookID); err != nil {
		return err
	}
	cfg.Key = []byte(id + ":" + secret)
	return nil
}
