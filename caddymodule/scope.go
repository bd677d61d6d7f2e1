package caddymodule

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Keys and scopes (the contract's "Keys and scopes"): every key a route
// claims is <scope>:<key>, the scope defaulting to the platform's name, so
// an unsigned generic route can never claim, block or answer a signed
// preset's key unless `scope` says it shares that preset's keys.

// fullKey is the key as the store, the admin API, the CLI, the logs
// (hashed) and {idempotency.key} see it.
func (h *Handler) fullKey(key string) string { return h.scope() + ":" + key }

// validScope accepts the names a scope may take: letters, digits, "_",
// "-" and "."; no ":" (it separates the scope from the key).
func validScope(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("scope must be 1 to 64 characters, got %q", s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("scope %q: only letters, digits, _, - and . (no ':')", s)
		}
	}
	return nil
}

// keyReadsBody tells whether a key template takes anything from the body
// ({idempotency.json|form|xml.*}): the key then is the notification's
// identity, and generic routes default to no fingerprint, since a retry
// may differ in other bytes (a new notify_time, fields reordered).
func keyReadsBody(template string) bool {
	for _, p := range []string{"{idempotency.json.", "{idempotency.form.", "{idempotency.xml."} {
		if strings.Contains(template, p) {
			return true
		}
	}
	return false
}

// rememberIn is guest.Route.Remember for h: it claims key (a platform's own: PayPal's transmission ids) as
// <scope>:<key> with fingerprint and completes it at once, so it is
// remembered for ttl; a claim that conflicts means key came before with
// another fingerprint (guest.Route.Remember).
func rememberIn(h *Handler) func(ctx context.Context, key, fingerprint string) (bool, error) {
	return func(ctx context.Context, key, fingerprint string) (bool, error) {
		key = h.fullKey(key)
		ctx, cancel := context.WithTimeout(ctx, time.Duration(h.StoreTimeout))
		defer cancel()
		res, err := h.store.Claim(ctx, key, fingerprint, time.Duration(h.LockTTL))
		if err != nil {
			return false, err
		}
		switch res.Outcome {
		case store.Conflict:
			return true, nil
		case store.Won:
			if err := h.store.Complete(ctx, key, res.Token, store.Answer{Status: 204, BodyCached: true}, time.Duration(h.TTL), store.Journal{}); err != nil {
				return false, err
			}
		}
		// InFlight or Answered: the same key with the same fingerprint (a
		// copy racing this one, or a resend): no conflict.
		return false, nil
	}
}

// provisionScope refuses a route whose scope another route of the same
// config keeps in another store (the Alipay return on the embedded
// default, its notify on Redis): a copy through one route never sees the
// other's claim, and the order runs twice. A reload's routes may differ
// from the ones they replace: those belong to another config's app.
func (h *Handler) provisionScope() error {
	for _, o := range h.siblings() {
		if o.scope() == h.scope() && o.storeConf.id() != h.storeConf.id() {
			return fmt.Errorf("scope %q: this route (%s) and another route of this config (%s) keep its keys in different stores; "+
				"a copy through one never sees the other's claim, and the backend runs twice: give both routes the same store, or this one a scope of its own",
				h.scope(), h.describe(), o.describe())
		}
	}
	return nil
}

// describe names a route for an operator: its platform, key and store.
func (h *Handler) describe() string {
	key := "the preset's key"
	if h.Key != "" {
		key = "key " + h.Key
	}
	where := ""
	if h.RouteOrigin != "" {
		where = ", at " + h.RouteOrigin
	}
	return fmt.Sprintf("platform %s, %s, store %s%s", h.Platform, key, h.storeConf.id(), where)
}
