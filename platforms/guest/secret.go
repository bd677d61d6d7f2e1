package guest

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/keying"
)

// SecretSetting is the one setting of a platform signed with a shared
// secret and nothing else (Stripe, Standard Webhooks): its `secret`
// subdirective, and the re-signer a route that has it gets. A module
// embeds it, so its JSON field is the module's own "secret".
type SecretSetting struct {
	// Secret is the signing secret. {env.*} and {file.*} are resolved once at start.
	Secret string `json:"secret,omitempty"`
	// resign signs a redelivered copy afresh; set by ResolveSecret.
	resign keying.Resigner
}

// ResolveSecret resolves the secret for r and, when there is one and the
// route verifies, makes its re-signer with resigner.
func (s *SecretSetting) ResolveSecret(r Route, resigner func(secret string) keying.Resigner) (string, error) {
	secret, err := r.Secret("secret", s.Secret)
	if err != nil {
		return "", err
	}
	s.resign = nil
	if secret != "" && !r.NoVerify {
		s.resign = resigner(secret)
	}
	return secret, nil
}

// UnmarshalSubdirective reads `secret` from the route's Caddyfile block.
func (s *SecretSetting) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	if name == "secret" {
		return true, cfparse.OneArg(d, &s.Secret)
	}
	return false, nil
}

// HasSecret tells whether the route sets the platform's secret.
func (s *SecretSetting) HasSecret() bool { return s.Secret != "" }

// Resigner signs a redelivered copy afresh with the route's secret; nil
// without one or under `verify off`.
func (s *SecretSetting) Resigner() keying.Resigner { return s.resign }
