package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store"
)

// The refused list (store.RefusedLog): a notification refused before its
// claim — a bad signature, an empty key, a body too large, a fingerprint
// conflict — is kept in the store, where every gateway instance and the
// operator's tools see it. A key rotated on one side only then shows up as
// a list of 401s with their bodies' first bytes, not only as a count.
//
// The write is one store write per refusal, on the refusal's own goroutine
// and bounded by refusalKeepTimeout; its error is logged, never answered.
// A flood of bad requests therefore costs the store what a flood of good
// ones would (a claim is a write too; the embedded store's group commit
// shares one fsync among concurrent writes, Redis takes one round trip),
// while the storage it can take is capped per scope (store.RefusedCap):
// the flood replaces that scope's list, and no other's. A store that is
// down costs each refusal at most refusalKeepTimeout.

// refusalKeepTimeout bounds keeping one refusal (or store_timeout, if
// shorter): a refusal is answered promptly whatever the store does.
const refusalKeepTimeout = 250 * time.Millisecond

// refusedClass is the reason class a status kept in the refused list
// stands for; false for the refusals that are not the sender's doing (a
// store error, a copy in flight) or no notification (a HEAD).
func refusedClass(status int) (outcome, bool) {
	switch status {
	case http.StatusUnauthorized:
		return outcomeRejectedSignature, true
	case http.StatusForbidden:
		return outcomeRejectedMerchant, true
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		// 405: a channel the route does not take (Alipay's return without
		// `return business` or `return display`); keepRefusal leaves out a
		// HEAD's.
		return outcomeBadRequest, true
	case http.StatusRequestEntityTooLarge:
		return outcomeTooLarge, true
	case http.StatusUnprocessableEntity:
		return outcomeConflict, true
	}
	return "", false
}

// keepRefusal keeps r, refused with status and told reason, in the
// store's refused list, if the status is one kept and the store keeps
// one. The body is kept as its length, SHA-256 and first bytes; no header
// (so no credential) is.
func (h *Handler) keepRefusal(r *http.Request, status int, reason string, body []byte) {
	class, ok := refusedClass(status)
	if !ok || h.store == nil || r.Method == http.MethodHead && status == http.StatusMethodNotAllowed {
		return
	}
	rl, ok := h.store.(store.RefusedLog)
	if !ok {
		return
	}
	rf := store.Refusal{Scope: h.scope(), Status: status, Class: string(class), Reason: reason, Length: -1}
	if h.reg != nil {
		rf.Route = h.reg.Name
	}
	switch {
	case body != nil: // read whole by the gate
		sum := sha256.Sum256(body)
		rf.Length, rf.SHA256 = int64(len(body)), hex.EncodeToString(sum[:])
		rf.Prefix = body[:min(len(body), store.RefusedPrefixMax)]
	case r.Body == nil || r.Body == http.NoBody:
		rf.Length = 0
	case r.ContentLength >= 0:
		rf.Length = r.ContentLength // not read: too large by its declared length
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		rf.Key, _ = repl.GetString("idempotency.key") // set once rendered: a conflict's
	}
	// Not bound by the request: a sender that hung up was refused all the same.
	bound := refusalKeepTimeout
	if st := time.Duration(h.StoreTimeout); st > 0 {
		bound = min(bound, st)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bound)
	defer cancel()
	if err := rl.AddRefused(ctx, rf); err != nil {
		if ce := h.logger.Check(zap.WarnLevel, "keeping a refused notification in the store failed"); ce != nil {
			ce.Write(zap.String("scope", rf.Scope), zap.Int("status", status), zap.Error(err))
		}
	}
}
