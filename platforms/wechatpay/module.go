package wechatpay

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
// (http.handlers.idempotency.platforms.wechatpay), with its own settings.
type Module struct {
	// Secret is the APIv3 key. {env.*} and {file.*} are resolved once at start.
	Secret string `json:"secret,omitempty"`
	// PublicKey is a PEM file: WeChat Pay's platform public key (with PublicKeyID).
	PublicKey string `json:"public_key,omitempty"`
	// PublicKeyID is the Wechatpay-Serial that PublicKey answers to.
	PublicKeyID string `json:"public_key_id,omitempty"`
	// Certificates are PEM files: WeChat Pay platform certificates.
	Certificates []string `json:"certificates,omitempty"`
	// MchIDs pins notifications to these merchants (the decrypted
	// resource's mchid, which needs Secret); empty accepts any.
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
	cfg := Config{NoVerify: r.NoVerify, Tolerance: r.Tolerance}
	if cfg.Secret, err = r.Secret("secret", m.Secret); err != nil {
		return nil, err
	}
	if m.PublicKey != "" {
		if cfg.PublicKey, err = r.PEM("public_key", m.PublicKey); err != nil {
			return nil, err
		}
	}
	if cfg.PublicKeyID, err = r.Secret("public_key_id", m.PublicKeyID); err != nil {
		return nil, err
	}
	for _, c := range m.Certificates {
		pem, err := r.PEM("certificate", c)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = append(cfg.Certificates, pem)
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
	case "public_key":
		return true, cfparse.OneArg(d, &m.PublicKey)
	case "public_key_id":
		return true, cfparse.OneArg(d, &m.PublicKeyID)
	case "certificate":
		return true, cfparse.ListArg(d, &m.Certificates)
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
	_ guest.SecretHolder  = (*Module)(nil)
)

// Resends: WeChat Pay has no resend; it answers its order query.
func (*Module) Resends() bool { return false }

// ReadAPIConfig reads catch_up's merchant_private_key (a PEM file) and
// merchant_serial; the merchant is the route's one mchid, and WeChat Pay's
// answers are verified with the route's public_key and public_key_id, or
// its first certificate.
func (m *Module) ReadAPIConfig(r guest.Route, creds map[string]string, cfg *keying.APIConfig) error {
	if err := guest.UnknownCredential("wechatpay", creds, "merchant_private_key", "merchant_serial"); err != nil {
		return err
	}
	if len(m.MchIDs) != 1 {
		return fmt.Errorf("catch_up: wechatpay asks for one merchant: the route must pin exactly one mchid (it pins %d)", len(m.MchIDs))
	}
	cfg.Merchant = r.Resolve(m.MchIDs[0])
	if creds["merchant_private_key"] == "" || creds["merchant_serial"] == "" {
		return errors.New("catch_up: wechatpay needs merchant_private_key <pem file> and merchant_serial <serial>")
	}
	var err error
	if cfg.Key, err = r.PEM("catch_up: merchant_private_key", creds["merchant_private_key"]); err != nil {
		return err
	}
	if cfg.KeyID, err = r.Secret("catch_up: merchant_serial", creds["merchant_serial"]); err != nil {
		return err
	}
	switch {
	case m.PublicKey != "":
		if cfg.PlatformKey, err = r.PEM("public_key", m.PublicKey); err != nil {
			return err
		}
		cfg.PlatformKeyID, err = r.Secret("public_key_id", m.PublicKeyID)
		return err
	case len(m.Certificates) > 0:
		cfg.PlatformKey, err = r.PEM("certificate", m.Certificates[0])
		return err
	}
	return errors.New("catch_up: wechatpay needs the route's public_key and public_key_id, or certificate, to verify its answers")
}
