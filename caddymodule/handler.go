// Package caddymodule is idemgate's Caddy adapter: the `idempotency` HTTP
// handler, its Caddyfile directive, the admin API, the CLI subcommand and the
// metrics. The logic that does not need Caddy lives in keying (notification
// parsing and signatures) and cache (the stores).
package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler forwards only the first copy of each payment notification to the
// next handler (usually reverse_proxy to a legacy backend), remembers the
// backend's successful answer and replays it to every later copy.
type Handler struct {
	// Platform names the notification format: generic (the default),
	// alipay, wechatpay, wechatpay_v2, stripe, paypal or standard_webhooks.
	// A preset verifies the platform's signature and knows its key,
	// fingerprint and success rule.
	Platform string `json:"platform,omitempty"`

	// Key is the idempotency key template (Caddy placeholders plus
	// {idempotency.json.*}, {idempotency.form.*}, {idempotency.xml.*}).
	// Required for generic; presets have a default. A placeholder that
	// renders empty makes the request a 400.
	Key string `json:"key,omitempty"`

	// Fingerprint is the template of what must be equal between copies of
	// one key; "off" disables the check. Default: the preset's fields; for
	// generic, none when the key template reads the body (the key is the
	// notification's identity), else a digest of the body.
	Fingerprint string `json:"fingerprint,omitempty"`

	// Scope is the key namespace: every key is claimed as <scope>:<key>.
	// Default: the platform name, so a generic route never shares a
	// preset's keys unless it names that preset's scope here.
	Scope string `json:"scope,omitempty"`

	// Store says where claims and answers live. Default: embedded.
	Store *StoreConfig `json:"store,omitempty"`

	// LockTTL is how long a claim lives without renewal. It is renewed
	// while the backend works, so it bounds how long a crashed gateway
	// blocks a key, not how long the backend may take. Default: 30s.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`

	// TTL is how long successful answers are remembered. It should outlive
	// the platform's retry window. Default: 72h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// InFlight is what a copy gets while the first copy is at the backend:
	// "wait" (the default) waits up to InFlightWait for the answer, then
	// answers 409 with Retry-After; "reject" answers 409 at once.
	InFlight string `json:"in_flight,omitempty"`
	// InFlightWait bounds a waiting copy. Default: 10s.
	InFlightWait caddy.Duration `json:"in_flight_wait,omitempty"`

	// OnStoreError is "fail_closed" (the default: 503 with Retry-After, the
	// platform retries later) or "pass" (forward unprotected and log it).
	OnStoreError string `json:"on_store_error,omitempty"`

	// StoreTimeout bounds each store operation. Default: 2s.
	StoreTimeout caddy.Duration `json:"store_timeout,omitempty"`

	// MaxBody bounds the request body read (413 above it). Default: 1MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// MaxAnswer bounds the answer body remembered for replay. A larger
	// successful answer still marks the key answered; duplicates then get
	// its status and headers without the body. Default: 64KiB.
	MaxAnswer int64 `json:"max_answer,omitempty"`

	// Success overrides the platform's success rule.
	Success *SuccessRule `json:"success,omitempty"`

	// OnDuplicate replaces the replay for duplicates on this route.
	OnDuplicate *DuplicateAction `json:"on_duplicate,omitempty"`

	// Secret is the Stripe / Standard Webhooks signing secret or the WeChat
	// Pay APIv3 / v2 key. {env.*} and {file.*} are resolved once at start.
	Secret string `json:"secret,omitempty"`
	// PublicKey is a PEM file: Alipay's public key, or WeChat Pay's
	// platform public key (with PublicKeyID).
	PublicKey string `json:"public_key,omitempty"`
	// PublicKeyID is the Wechatpay-Serial that PublicKey answers to.
	PublicKeyID string `json:"public_key_id,omitempty"`
	// Certificates are PEM files: WeChat Pay platform certificates or
	// PayPal's signing certificate.
	Certificates []string `json:"certificates,omitempty"`
	// WebhookID is PayPal's webhook subscription id.
	WebhookID string `json:"webhook_id,omitempty"`
	// VerifyOff runs a preset without signature checks. It is logged at
	// start; use it only behind something else that verifies.
	VerifyOff bool `json:"verify_off,omitempty"`
	// Tolerance is how far a signed timestamp (WeChat Pay v3, Stripe,
	// PayPal, Standard Webhooks) may be from the gateway's clock.
	// Default: 5m.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`
	// AppIDs pins Alipay notifications to these app_ids.
	AppIDs []string `json:"app_id,omitempty"`
	// MchIDs pins WeChat Pay notifications to these merchants (v3: the
	// decrypted resource's mchid, which needs Secret; v2: mch_id).
	MchIDs []string `json:"mchid,omitempty"`

	// LogKeys writes keys in clear in logs; by default only a hash.
	LogKeys bool `json:"log_keys,omitempty"`
	// WarnCopies logs a warning when a key has been seen more than this
	// many times. Default: 5.
	WarnCopies int64 `json:"warn_copies,omitempty"`

	platform keying.Platform
	// bodyKeyed: a generic route whose key reads the body, so its
	// default fingerprint is off.
	bodyKeyed bool
	store     cache.Store
	storeConf StoreConfig
	success   func(status int, header http.Header, body []byte) bool
	logger    *zap.Logger
	metrics   *metrics
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// SuccessRule overrides what answer counts as handled.
type SuccessRule struct {
	// Statuses are codes ("200", "302") or classes ("2xx").
	Statuses []string `json:"statuses,omitempty"`
	// Body, if set, must equal the answer's body (surrounding white space
	// trimmed), as Alipay's "success".
	Body string `json:"body,omitempty"`
}

// DuplicateAction is what duplicates on a route get instead of the replay:
// a redirect (a browser return page) or a fixed answer.
type DuplicateAction struct {
	// Redirect is a URL template; duplicates get 302 to it.
	Redirect string `json:"redirect,omitempty"`
	// Status and Body are a fixed answer.
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
}

// Provision sets defaults, reads secrets and opens the store.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Platform == "" {
		h.Platform = "generic"
	}
	if h.LockTTL == 0 {
		h.LockTTL = caddy.Duration(30 * time.Second)
	}
	if h.TTL == 0 {
		h.TTL = caddy.Duration(72 * time.Hour)
	}
	if h.InFlight == "" {
		h.InFlight = "wait"
	}
	if h.InFlightWait == 0 {
		h.InFlightWait = caddy.Duration(10 * time.Second)
	}
	if h.OnStoreError == "" {
		h.OnStoreError = "fail_closed"
	}
	if h.StoreTimeout == 0 {
		h.StoreTimeout = caddy.Duration(2 * time.Second)
	}
	if h.MaxBody == 0 {
		h.MaxBody = 1 << 20
	}
	if h.MaxAnswer == 0 {
		h.MaxAnswer = 64 << 10
	}
	if h.WarnCopies == 0 {
		h.WarnCopies = 5
	}

	// Secrets are resolved once with a fresh replacer: the request's
	// replacer is for per-request templates only.
	repl := caddy.NewReplacer()
	cfg := keying.Config{
		Secret:      repl.ReplaceKnown(h.Secret, ""),
		PublicKeyID: repl.ReplaceKnown(h.PublicKeyID, ""),
		WebhookID:   repl.ReplaceKnown(h.WebhookID, ""),
		NoVerify:    h.VerifyOff,
		Tolerance:   time.Duration(h.Tolerance),
	}
	for _, id := range h.AppIDs {
		cfg.AppIDs = append(cfg.AppIDs, repl.ReplaceKnown(id, ""))
	}
	for _, id := range h.MchIDs {
		cfg.MchIDs = append(cfg.MchIDs, repl.ReplaceKnown(id, ""))
	}
	if h.Platform == "paypal" {
		// Transmission ids are remembered in this route's store.
		cfg.TransmissionLog = transmissionLog{h}
	}
	h.bodyKeyed = h.Platform == "generic" && keyReadsBody(h.Key)
	if h.PublicKey != "" {
		pem, err := os.ReadFile(repl.ReplaceKnown(h.PublicKey, ""))
		if err != nil {
			return fmt.Errorf("loading public_key: %v", err)
		}
		cfg.PublicKey = pem
	}
	for _, c := range h.Certificates {
		pem, err := os.ReadFile(repl.ReplaceKnown(c, ""))
		if err != nil {
			return fmt.Errorf("loading certificate: %v", err)
		}
		cfg.Certificates = append(cfg.Certificates, pem)
	}
	p, err := keying.New(h.Platform, cfg)
	if err != nil {
		return err // "<preset>: <what>" already
	}
	h.platform = p
	if h.VerifyOff {
		h.logger.Warn("signature verification is OFF for this route: forged notifications will be forwarded",
			zap.String("platform", h.Platform))
	}
	if w := p.RetryWindow(); w > time.Duration(h.TTL) {
		h.logger.Warn("ttl is shorter than the platform's retry window: late retries will reach the backend again",
			zap.String("platform", h.Platform), zap.Duration("ttl", time.Duration(h.TTL)), zap.Duration("retry_window", w))
	}

	h.success = p.Success
	if h.Success != nil {
		rule, err := h.Success.compile()
		if err != nil {
			return fmt.Errorf("success: %v", err)
		}
		h.success = rule
	}

	sc := StoreConfig{Type: "embedded"}
	if h.Store != nil {
		sc = *h.Store
	}
	switch sc.Type {
	case "", "embedded":
		sc.Type = "embedded"
		if sc.Path == "" {
			sc.Path = defaultEmbeddedPath()
		}
		sc.Path = repl.ReplaceKnown(sc.Path, "")
	case "redis":
		sc.Username = repl.ReplaceKnown(sc.Username, "")
		sc.Password = repl.ReplaceKnown(sc.Password, "")
		for i, a := range sc.Addresses {
			sc.Addresses[i] = repl.ReplaceKnown(a, "")
		}
	}
	ps, err := loadStore(sc)
	if err != nil {
		return fmt.Errorf("loading store: %v", err)
	}
	h.store, h.storeConf = ps.Store, sc
	h.metrics = loadMetrics(ctx)
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Platform == "generic" && h.Key == "" {
		return fmt.Errorf("generic: needs a key template")
	}
	if h.Scope != "" {
		if err := validScope(h.Scope); err != nil {
			return err
		}
	}
	if h.InFlight != "wait" && h.InFlight != "reject" {
		return fmt.Errorf("in_flight must be wait or reject, not %q", h.InFlight)
	}
	if h.OnStoreError != "fail_closed" && h.OnStoreError != "pass" {
		return fmt.Errorf("on_store_error must be fail_closed or pass, not %q", h.OnStoreError)
	}
	if h.MaxBody < 0 || h.MaxAnswer < 0 {
		return fmt.Errorf("max_body and max_answer must be positive")
	}
	if h.LockTTL < caddy.Duration(time.Second) {
		return fmt.Errorf("lock_ttl must be at least 1s (it is renewed at a third of its length)")
	}
	if d := h.OnDuplicate; d != nil && d.Redirect == "" && (d.Status < 100 || d.Status > 999) {
		return fmt.Errorf("on_duplicate needs a redirect or a status")
	}
	return nil
}

// ServeHTTP runs one notification through the claim / forward / remember /
// replay cycle; see the contract's answer table.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	start := time.Now()
	d := &decision{start: start}
	ctx, span := h.startSpan(r)
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	defer func() {
		repl.Set("idempotency.outcome", string(d.outcome))
		h.finish(ctx, span, d)
	}()

	body, err := h.readBody(r)
	if err != nil {
		d.outcome, d.err = outcomeTooLarge, err
		var he caddyhttp.HandlerError
		if errors.As(err, &he) && he.StatusCode != http.StatusRequestEntityTooLarge {
			d.outcome = outcomeBadRequest
		}
		return err
	}

	n, err := h.platform.Verify(&keying.Request{
		Method: r.Method, URL: r.URL, Header: r.Header, Body: body, Now: now(), Context: r.Context(),
	})
	switch {
	case errors.Is(err, keying.ErrUnavailable):
		// The check needs the store (PayPal's transmission log).
		return h.storeFailed(w, r, next, d, err)
	case errors.Is(err, keying.ErrSignature):
		d.outcome, d.err = outcomeRejectedSignature, err
		return caddyhttp.Error(http.StatusUnauthorized, err)
	case err != nil:
		d.outcome, d.err = outcomeBadRequest, err
		return caddyhttp.Error(http.StatusBadRequest, err)
	}

	bp := &bodyPlaceholders{n: n, platform: h.Platform}
	repl.Map(bp.get)
	key, err := h.renderKey(repl, bp, n)
	if err != nil {
		d.outcome, d.err = outcomeBadRequest, err
		return caddyhttp.Error(http.StatusBadRequest, err)
	}
	d.key = key
	repl.Set("idempotency.key", key)
	fp, err := h.renderFingerprint(repl, bp, n)
	if err != nil {
		d.outcome, d.err = outcomeBadRequest, err
		return caddyhttp.Error(http.StatusBadRequest, err)
	}

	return h.serve(w, r, next, repl, d, key, fp)
}

// serve claims key and acts on the claim's outcome.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, d *decision, key, fp string,
) error {
	var waitUntil time.Time
	for {
		res, err := h.claim(r.Context(), key, fp)
		if err != nil && r.Context().Err() != nil {
			// The platform hung up; the store is not to blame.
			d.outcome, d.err = outcomeCanceled, err
			return caddyhttp.Error(499, err)
		}
		if err != nil {
			return h.storeFailed(w, r, next, d, err)
		}
		if res.Record != nil {
			d.copies = res.Record.Copies
		}
		switch res.Outcome {
		case cache.Won:
			return h.forward(w, r, next, d, key, res.Token)
		case cache.Answered:
			if d.outcome != outcomeWaited {
				d.outcome = outcomeReplayed
			}
			return h.replay(w, r, repl, res.Record)
		case cache.Conflict:
			d.outcome = outcomeConflict
			d.err = errors.New("same key, different fingerprint: possible tampering")
			return caddyhttp.Error(http.StatusUnprocessableEntity, d.err)
		}

		// In flight.
		if h.InFlight == "reject" {
			d.outcome = outcomeInFlight
			return h.tryLater(w, http.StatusConflict, errors.New("the first copy of this notification is still being processed"))
		}
		if waitUntil.IsZero() {
			waitUntil = time.Now().Add(time.Duration(h.InFlightWait))
		}
		d.outcome = outcomeWaited
		rec, err := h.waitFor(r.Context(), key, waitUntil)
		switch {
		case err != nil && r.Context().Err() != nil:
			d.outcome = outcomeCanceled
			return caddyhttp.Error(499, err)
		case errors.Is(err, errWaitTimeout):
			d.outcome = outcomeInFlight
			return h.tryLater(w, http.StatusConflict, errors.New("timed out waiting for the first copy of this notification"))
		case err != nil:
			// The key is known to be in flight: whatever on_store_error
			// says, forwarding this copy could run the backend twice.
			d.outcome, d.err = outcomeStoreError, err
			h.metrics.storeError(r.Context(), h.Platform, "wait")
			return h.tryLater(w, http.StatusServiceUnavailable, fmt.Errorf("waiting for the first copy: %w", err))
		case rec != nil:
			d.copies = rec.Copies
			return h.replay(w, r, repl, rec)
		}
		// The first copy was released (the backend failed): this copy is a
		// legitimate retry and claims again.
	}
}

var errWaitTimeout = errors.New("wait timed out")

// waitFor blocks until key is answered (the record), released or deleted
// (nil, nil), or until deadline (errWaitTimeout). It subscribes before it
// looks, so a completion between the two is not missed.
func (h *Handler) waitFor(ctx context.Context, key string, deadline time.Time) (*cache.Record, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// ended turns the error of a wait cut short into errWaitTimeout when
	// the wait ran out, and keeps it when the request went away first.
	ended := func(err error) error {
		if !time.Now().Before(deadline) {
			return errWaitTimeout
		}
		return err
	}
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Duration(h.StoreTimeout))
		done, stop, err := h.store.Wait(sctx, key)
		if err == nil {
			var rec *cache.Record
			rec, err = h.store.Lookup(sctx, key)
			if err == nil && rec.State == cache.StateAnswered {
				scancel()
				stop()
				return rec, nil
			}
		}
		scancel()
		if errors.Is(err, cache.ErrNotFound) {
			stop()
			return nil, nil
		}
		if err != nil {
			if stop != nil {
				stop()
			}
			if ctx.Err() != nil {
				return nil, ended(err)
			}
			return nil, err
		}
		// Still in flight: wait for the wake-up. A periodic re-check
		// covers a claim that expires (its owner died) without a wake-up.
		recheck := time.NewTimer(time.Duration(h.LockTTL) / 3)
		select {
		case <-done:
		case <-recheck.C:
		case <-ctx.Done():
		}
		recheck.Stop()
		stop()
		if ctx.Err() != nil {
			return nil, ended(ctx.Err())
		}
	}
}

// forward sends the winning copy to the backend, renewing the claim while
// the backend works, and then remembers or releases.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	d *decision, key, token string,
) error {
	d.outcome = outcomeForwarded
	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(r.Context()))
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		h.renewLoop(renewCtx, key, token, d)
	}()

	tw := &teeWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, limit: int(h.MaxAnswer)}
	// The backend's request outlives the platform's connection: platforms
	// hang up after a few seconds, and a backend cut off mid-way leaves an
	// outcome nobody knows. Let it finish, remember its answer, and the
	// platform's retry gets the replay. The ceiling stops a hung backend
	// from holding the key (renewed) forever.
	bctx, bcancel := context.WithTimeout(context.WithoutCancel(r.Context()), backendCeiling)
	defer bcancel()
	backendStart := time.Now()
	err := next.ServeHTTP(tw, r.WithContext(bctx))
	h.metrics.backendDuration(r.Context(), h.Platform, time.Since(backendStart))
	stopRenew()
	<-renewDone

	// Settle the claim even if the client went away: the backend's answer
	// is what counts.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Duration(h.StoreTimeout))
	defer cancel()

	if err != nil {
		var he caddyhttp.HandlerError
		var de reverseproxy.DialError
		notSent := !tw.wroteHeader && (errors.As(err, &de) ||
			(errors.As(err, &he) && he.StatusCode == http.StatusServiceUnavailable))
		if notSent {
			d.outcome = outcomeBackendUnreachable
			h.release(sctx, key, token, d)
			return err
		}
		// The request may have reached the backend: hold the claim until
		// lock_ttl runs out, so an immediate retry does not run the
		// business logic twice, and a later one can.
		d.outcome = outcomeAmbiguous
		d.err = err
		return err
	}

	status := tw.status
	if !tw.wroteHeader {
		status = http.StatusOK
	}
	// A body larger than max_answer was not kept: the rule sees none, so a
	// rule that reads the body (Alipay's "success") cannot match it.
	var body []byte
	if !tw.overflow {
		body = tw.buf.Bytes()
	}
	if !h.success(status, tw.header, body) {
		d.outcome = outcomeBackendFailed
		h.release(sctx, key, token, d)
		return nil
	}
	ans := cache.Answer{Status: status, Header: replayHeaders(tw.header), BodyCached: !tw.overflow}
	if ans.BodyCached {
		ans.Body = bytes.Clone(body)
	}
	if err := h.store.Complete(sctx, key, token, ans, time.Duration(h.TTL)); err != nil {
		h.claimTrouble(d, "complete", err)
	}
	return nil
}

// renewLoop extends the claim at a third of lock_ttl while the backend works.
func (h *Handler) renewLoop(ctx context.Context, key, token string, d *decision) {
	every := time.Duration(h.LockTTL) / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Duration(h.StoreTimeout))
		err := h.store.Renew(rctx, key, token, time.Duration(h.LockTTL))
		cancel()
		if err != nil && ctx.Err() == nil {
			h.claimTrouble(d, "renew", err)
			if errors.Is(err, cache.ErrNotOwner) {
				return
			}
		}
	}
}

func (h *Handler) release(ctx context.Context, key, token string, d *decision) {
	if err := h.store.Release(ctx, key, token); err != nil {
		h.claimTrouble(d, "release", err)
	}
}

// claimTrouble logs and counts a claim that could not be settled. A lost
// claim (ErrNotOwner) means another request may have run the backend too.
func (h *Handler) claimTrouble(d *decision, op string, err error) {
	if errors.Is(err, cache.ErrNotOwner) {
		h.metrics.lostClaim(context.Background(), h.Platform, op)
		h.logger.Error("lost the claim on an idempotency key while its request was at the backend",
			zap.String("op", op), zap.String("key", h.logKey(d.key)), zap.Error(err))
		return
	}
	h.metrics.storeError(context.Background(), h.Platform, op)
	h.logger.Error("store failed to settle a claim; it expires after lock_ttl",
		zap.String("op", op), zap.String("key", h.logKey(d.key)), zap.Error(err))
}

// replay writes a remembered answer, or the route's on_duplicate action.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, rec *cache.Record) error {
	if a := h.OnDuplicate; a != nil {
		if a.Redirect != "" {
			w.Header().Set("Location", repl.ReplaceAll(a.Redirect, ""))
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusFound)
			return nil
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(a.Status)
		_, err := io.WriteString(w, repl.ReplaceKnown(a.Body, ""))
		return err
	}
	hdr := w.Header()
	for k, v := range rec.Header {
		hdr[k] = append([]string(nil), v...)
	}
	hdr.Set("Idempotent-Replayed", "true")
	if rec.BodyCached {
		hdr.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	if r.Method == http.MethodHead || !rec.BodyCached {
		return nil
	}
	_, err := w.Write(rec.Body)
	return err
}

// storeFailed applies on_store_error.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, d *decision, err error) error {
	d.err = err
	h.metrics.storeError(r.Context(), h.Platform, "claim")
	if h.OnStoreError == "pass" {
		d.outcome = outcomePassed
		h.logger.Warn("store unreachable: forwarding WITHOUT idempotency protection (on_store_error pass)",
			zap.String("key", h.logKey(d.key)), zap.Error(err))
		return next.ServeHTTP(w, r)
	}
	d.outcome = outcomeStoreError
	return h.tryLater(w, http.StatusServiceUnavailable, fmt.Errorf("idempotency store unavailable: %w", err))
}

// tryLater answers an error status with Retry-After.
func (h *Handler) tryLater(w http.ResponseWriter, status int, err error) error {
	w.Header().Set("Retry-After", "5")
	return caddyhttp.Error(status, err)
}

func (h *Handler) claim(ctx context.Context, key, fp string) (cache.ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(h.StoreTimeout))
	defer cancel()
	return h.store.Claim(ctx, key, fp, time.Duration(h.LockTTL))
}

// readBody reads the whole request body, bounded by max_body, and puts the
// same bytes back for the backend.
func (h *Handler) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > h.MaxBody {
		return nil, caddyhttp.Error(http.StatusRequestEntityTooLarge,
			fmt.Errorf("body of %d bytes is larger than max_body %d", r.ContentLength, h.MaxBody))
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	size := r.ContentLength
	if size < 0 || size > h.MaxBody {
		size = 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, h.MaxBody+1))
	if err != nil {
		return nil, caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("reading body: %v", err))
	}
	if int64(buf.Len()) > h.MaxBody {
		return nil, caddyhttp.Error(http.StatusRequestEntityTooLarge,
			fmt.Errorf("body is larger than max_body %d", h.MaxBody))
	}
	body := buf.Bytes()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return body, nil
}

// backendCeiling bounds a forwarded request once the platform's connection
// no longer does.
const backendCeiling = 10 * time.Minute

// maxKeyLen bounds a rendered key; stores put it in their own keys.
const maxKeyLen = 1024

// renderKey renders the key template, or takes the preset's default, and
// puts the route's scope in front: the full key.
// Every placeholder of a template must render non-empty: a missing order
// id must not collapse distinct notifications onto one key.
func (h *Handler) renderKey(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification) (string, error) {
	key := n.Key
	if h.Key != "" {
		var empty []string
		out, err := repl.ReplaceFunc(h.Key, func(name string, val any) (any, error) {
			if caddy.ToString(val) == "" {
				empty = append(empty, "{"+name+"}")
			}
			return val, nil
		})
		if err != nil {
			return "", fmt.Errorf("key: %v", err)
		}
		if bp.err != nil {
			return "", fmt.Errorf("key: %w", bp.err)
		}
		if len(empty) > 0 {
			return "", fmt.Errorf("key: %s is empty in this request", strings.Join(empty, ", "))
		}
		key = out
	}
	if strings.TrimSpace(key) == "" {
		return "", errors.New("no idempotency key in this request")
	}
	key = h.fullKey(key)
	if len(key) > maxKeyLen {
		return "", fmt.Errorf("key is longer than %d bytes", maxKeyLen)
	}
	return key, nil
}

// renderFingerprint returns the digest of the fingerprint material, "" when off.
func (h *Handler) renderFingerprint(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification) (string, error) {
	switch h.Fingerprint {
	case "off":
		return "", nil
	case "":
		if n.Fingerprint == "" || h.bodyKeyed {
			return "", nil
		}
		return keying.Digest([]byte(n.Fingerprint)), nil
	}
	out := repl.ReplaceAll(h.Fingerprint, "")
	if bp.err != nil {
		return "", fmt.Errorf("fingerprint: %w", bp.err)
	}
	return keying.Digest([]byte(out)), nil
}

// logKey is the key as it may appear in logs and spans: hashed unless
// log_keys is on.
func (h *Handler) logKey(key string) string {
	if h.LogKeys || key == "" {
		return key
	}
	return hashKey(key)
}

func hashKey(key string) string { return keying.Digest([]byte(key))[:16] }

// Cleanup drops this handler's reference to its store.
func (h *Handler) Cleanup() error {
	if h.store == nil {
		return nil
	}
	return unloadStore(h.storeConf)
}

// now is the clock signatures are judged against; tests replace it.
var now = time.Now

// compile turns a success rule into a predicate.
func (s SuccessRule) compile() (func(int, http.Header, []byte) bool, error) {
	type span struct{ lo, hi int }
	var spans []span
	for _, st := range s.Statuses {
		if len(st) == 3 && strings.HasSuffix(strings.ToLower(st), "xx") && st[0] >= '1' && st[0] <= '5' {
			c := int(st[0]-'0') * 100
			spans = append(spans, span{c, c + 99})
			continue
		}
		c, err := strconv.Atoi(st)
		if err != nil || c < 100 || c > 999 {
			return nil, fmt.Errorf("%q is not a status code or class like 2xx", st)
		}
		spans = append(spans, span{c, c})
	}
	if len(spans) == 0 {
		spans = []span{{200, 299}}
	}
	want := strings.TrimSpace(s.Body)
	return func(status int, _ http.Header, body []byte) bool {
		for _, sp := range spans {
			if status >= sp.lo && status <= sp.hi {
				return want == "" || string(bytes.TrimSpace(body)) == want
			}
		}
		return false
	}, nil
}

// bodyPlaceholders serves {idempotency.json.*}, {idempotency.form.*},
// {idempotency.xml.*} and {idempotency.<platform>.*} from the verified
// notification, and remembers a parse failure so the 400 can say why.
type bodyPlaceholders struct {
	n        *keying.Notification
	platform string
	err      error
}

func (bp *bodyPlaceholders) get(name string) (any, bool) {
	rest, ok := strings.CutPrefix(name, "idempotency.")
	if !ok {
		return nil, false
	}
	kind, path, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	var (
		val string
		err error
	)
	switch kind {
	case "json":
		val, ok, err = bp.n.Fields.JSON(path)
	case "form":
		val, ok, err = bp.n.Fields.Form(path)
	case "xml":
		val, ok, err = bp.n.Fields.XML(path)
	default:
		if kind != bp.platform || bp.n.Extra == nil {
			return nil, false
		}
		val, ok = bp.n.Extra(path)
	}
	if err != nil && bp.err == nil {
		bp.err = err
	}
	return val, ok
}

// replayHeaders keeps the headers that are safe to send again to another
// copy: not hop-by-hop, not per-response (Date), not cookies.
func replayHeaders(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		switch k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Trailer",
			"Te", "Date", "Set-Cookie", "Content-Length", "Idempotent-Replayed", "Alt-Svc":
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

// teeWriter passes the backend's answer through to the client as it comes
// and keeps a copy (status, header snapshot, body up to limit) to remember.
type teeWriter struct {
	*caddyhttp.ResponseWriterWrapper
	status      int
	header      http.Header
	wroteHeader bool
	buf         bytes.Buffer
	limit       int
	overflow    bool
	clientErr   error // the first failed write to the client
}

func (t *teeWriter) WriteHeader(status int) {
	if t.wroteHeader {
		return
	}
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		t.ResponseWriterWrapper.WriteHeader(status)
		return
	}
	t.wroteHeader = true
	t.status = status
	// The header map is live: clone it before the next handler or the
	// server changes it.
	t.header = t.Header().Clone()
	t.ResponseWriterWrapper.WriteHeader(status)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	if !t.overflow {
		if t.buf.Len()+len(p) > t.limit {
			t.overflow = true
			t.buf = bytes.Buffer{}
		} else {
			t.buf.Write(p)
		}
	}
	// A client that went away must not stop the copy: the backend's whole
	// answer is still read, so it can be remembered and replayed to the
	// platform's retry.
	if t.clientErr == nil {
		if _, err := t.ResponseWriterWrapper.Write(p); err != nil {
			t.clientErr = err
		}
	}
	return len(p), nil
}

// ReadFrom must go through Write, or the wrapper's ReadFrom would send the
// body past the copy.
func (t *teeWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{t}, r)
}

type writerOnly struct{ io.Writer }

// decision is what one request's trip through the handler decided, for the
// log line, the span and the metrics.
type decision struct {
	start   time.Time
	key     string
	outcome outcome
	copies  int64
	err     error
}

// outcome is a bounded metric label and the {idempotency.outcome} value.
type outcome string

const (
	outcomeForwarded          outcome = "forwarded"
	outcomeReplayed           outcome = "replayed"
	outcomeWaited             outcome = "waited"
	outcomeInFlight           outcome = "in_flight"
	outcomeConflict           outcome = "conflict"
	outcomeRejectedSignature  outcome = "rejected_signature"
	outcomeBadRequest         outcome = "bad_request"
	outcomeTooLarge           outcome = "too_large"
	outcomeStoreError         outcome = "store_error"
	outcomePassed             outcome = "passed"
	outcomeBackendFailed      outcome = "backend_failed"
	outcomeBackendUnreachable outcome = "backend_unreachable"
	outcomeAmbiguous          outcome = "ambiguous"
	outcomeCanceled           outcome = "canceled"
)

// finish logs, counts and ends the span of one decision.
func (h *Handler) finish(ctx context.Context, span spanEnder, d *decision) {
	h.metrics.request(ctx, h.Platform, string(d.outcome), time.Since(d.start))
	if d.outcome == outcomeWaited {
		h.metrics.waitDuration(ctx, h.Platform, time.Since(d.start))
	}
	if d.copies > 0 {
		h.metrics.copies(ctx, h.Platform, d.copies)
	}
	span.end(d)

	level := zapcore.InfoLevel
	msg := "idempotency decision"
	switch d.outcome {
	case outcomeConflict:
		level, msg = zapcore.ErrorLevel, "same idempotency key with a different fingerprint: possible tampering"
	case outcomeAmbiguous:
		level, msg = zapcore.WarnLevel, "backend outcome unknown: claim held until lock_ttl runs out"
	case outcomeRejectedSignature:
		level = zapcore.WarnLevel
	case outcomeStoreError:
		level = zapcore.ErrorLevel
	default:
		// Warn when a key crosses warn_copies and then every 100 copies,
		// not on every copy of a hot key.
		if d.copies == h.WarnCopies+1 || (d.copies > h.WarnCopies && d.copies%100 == 0) {
			level, msg = zapcore.WarnLevel, "idempotency key seen more often than warn_copies"
		}
	}
	if ce := h.logger.Check(level, msg); ce != nil {
		fields := []zap.Field{
			zap.String("platform", h.Platform),
			zap.String("outcome", string(d.outcome)),
			zap.Duration("duration", time.Since(d.start)),
		}
		if d.key != "" {
			fields = append(fields, zap.String("key", h.logKey(d.key)))
		}
		if d.copies > 0 {
			fields = append(fields, zap.Int64("copies", d.copies))
		}
		if d.err != nil {
			fields = append(fields, zap.Error(d.err))
		}
		ce.Write(fields...)
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ io.ReaderFrom               = (*teeWriter)(nil)
)
