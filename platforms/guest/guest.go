// Package guest is what a platform is to the idempotency handler: a Caddy
// guest module in the namespace http.handlers.idempotency.platforms, loaded
// by the handler as reverse_proxy loads its transport. A platform module
// owns its settings (its JSON fields, and the subdirectives it parses from
// the route's flat Caddyfile block), describes itself with a keying.Preset
// and builds the route's check. What only some platforms can do (a bill,
// a re-signer, a test signer, a read API, merchant pinning) are the small
// interfaces below, which the handler asks for by type assertion.
//
// A platform written outside this repository implements Module, registers
// itself with caddy.RegisterModule under Namespace + "." + its name, and
// builds in with `xcaddy build --with`; nothing else names it.
package guest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
)

// Namespace is the platforms' module namespace; a platform's module ID is
// Namespace + "." + its name (the name a route writes after `platform`).
const Namespace = "http.handlers.idempotency.platforms"

// Module is a platform as the handler loads it.
type Module interface {
	caddy.Module
	// Preset describes the platform beyond its check.
	Preset() *keying.Preset
	// Build returns the route's check, configured with the module's own
	// settings and what the route gives every platform. Errors read
	// "<name>: <what>".
	Build(r Route) (keying.Platform, error)
}

// Route is what the handler gives every platform when it builds one.
type Route struct {
	// NoVerify runs the platform without signature checks (`verify off`).
	NoVerify bool
	// Tolerance for signed timestamps; 0 means the platform's default.
	Tolerance time.Duration
	// Secret resolves a secret-bearing setting ({env.*}, {file.*}) once:
	// a template that renders empty is an error naming field and cause,
	// never the value.
	Secret func(field, tmpl string) (string, error)
	// Resolve renders the known placeholders of a plain setting (an id).
	Resolve func(tmpl string) string
	// PEM reads the PEM file a setting names (the path may be a
	// placeholder), bounded.
	PEM func(field, tmpl string) ([]byte, error)
	// Remember claims key (the platform's own, under the route's scope)
	// with fingerprint in the route's store for the answers' ttl, and
	// reports conflict when key was remembered before with another
	// fingerprint (PayPal's transmission log).
	Remember func(ctx context.Context, key, fingerprint string) (conflict bool, err error)
}

// Subdirectives is a platform that takes settings in the route's
// Caddyfile block, which stays flat as users write it: `platform alipay`
// then `public_key …`, `app_id …` beside the handler's own subdirectives.
// The handler hands the module each subdirective it does not know.
type Subdirectives interface {
	// UnmarshalSubdirective reads subdirective name and its arguments
	// from d (positioned on name); handled is false for a name the
	// platform does not take.
	UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (handled bool, err error)
}

// SecretHolder is a platform whose settings may hold the secret that
// opens its encrypted part (keying.Preset.SecretFor): placeholders read
// from that part need it.
type SecretHolder interface {
	HasSecret() bool
}

// Pinner is a platform that pins notifications to merchants (app_id,
// mchid); Merchants are the ids as resolved by Build.
type Pinner interface {
	Merchants() []string
}

// Resigner is a platform that can sign a redelivered copy afresh with the
// route's secret; Resigner is nil when the route cannot (no secret,
// `verify off`). Asked after Build.
type Resigner interface {
	Resigner() keying.Resigner
}

// Biller is a platform whose bill reconciliation reads.
type Biller interface {
	Bill() *bill.Traits
}

// Signer is a platform that signs test notifications for the CLI's send
// and keygen.
type Signer interface {
	Sender() *keying.Sender
}

// Reader is a platform with a read API that finds payments whose
// notification never arrived.
type Reader interface {
	ReadAPI() keying.ReadAPI
}

// CatchUpper is a platform whose read API a route's `catch_up` block
// configures. The block's credential subdirectives (api_key,
// app_private_key, …) are the platform's own: it reads them, with its own
// settings (the route's app_id, public_key, webhook_id, …), into the read
// API's config, so the handler names no platform.
type CatchUpper interface {
	// ReadAPIConfig fills cfg's credentials and merchant from creds (the
	// block's other subdirectives, by name, as written: templates the
	// route's Secret, Resolve and PEM read) and the module's settings. An
	// unknown name is an error naming the ones the platform takes. Called
	// after Build.
	ReadAPIConfig(r Route, creds map[string]string, cfg *keying.APIConfig) error
	// Resends: the platform's API resends an event (`recover resend`);
	// otherwise it answers by order (`recover query_route`).
	Resends() bool
}

// UnknownCredential is the error of a catch_up credential a platform does
// not take.
func UnknownCredential(platform string, creds map[string]string, takes ...string) error {
	for name := range creds {
		if !slices.Contains(takes, name) {
			return fmt.Errorf("catch_up: unknown subdirective %q for %s (want api, every, grace, window, recover, %s)", name, platform, strings.Join(takes, ", "))
		}
	}
	return nil
}

// ID is the module ID of the platform named name.
func ID(name string) caddy.ModuleID { return caddy.ModuleID(Namespace + "." + name) }
