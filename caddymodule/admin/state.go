package admin

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// The states of a deliver async route's key that the store keeps in
// flight (delivery.StateShown).
const (
	StateQueued     = delivery.StateQueued
	StateRetrying   = delivery.StateRetrying
	StateDelivering = delivery.StateDelivering
)

// KeyState is a record's state as the operator surfaces name it now.
type KeyState = delivery.Shown

// StateOf reads a record's state now by delivery.StateShown, the rule
// every surface names states by, with the record's route (its retry
// window, whether it delivers async) and what this process's engine of
// its scope knows of the key.
func StateOf(a *app.App, rec *store.Record) KeyState {
	rt, ok := routeOf(a, rec)
	if !ok {
		return delivery.StateShown(rec, a.Now(), 0, false, nil)
	}
	var held *delivery.KeyState
	if e, ok := a.EngineOf(rt.Scope); ok && rt.Async && rec.State == store.StateInFlight {
		if kd, ok := e.KeyState(rec.Key); ok {
			ks := delivery.KeyState(kd)
			held = &ks
		}
	}
	return delivery.StateShown(rec, a.Now(), rt.RetryWindow, rt.Async, held)
}

// ListedState is StateOf for a record from a listing (ListedRecord).
func ListedState(ctx context.Context, a *app.App, ps *app.Store, rec *store.Record) KeyState {
	return StateOf(a, ListedRecord(ctx, a, ps, rec))
}

// ListedRecord is a record from a listing, which carries no journal, as
// the state rule needs it: an async key in flight that has had attempts
// is read whole, so that one another instance is retrying reads retrying
// in a list as on its key page.
func ListedRecord(ctx context.Context, a *app.App, ps *app.Store, rec *store.Record) *store.Record {
	if rec.State != store.StateInFlight || rec.AttemptCount == 0 || len(rec.Attempts) > 0 {
		return rec
	}
	if rt, ok := routeOf(a, rec); ok && rt.Async {
		if full, err := ps.Lookup(ctx, rec.Key); err == nil {
			return full
		}
	}
	return rec
}

// RetriesView is what the platform's retry schedule leaves of a failed
// notification's retries: estimates from its first receipt and the copies
// seen (keying.Schedule.Estimate).
type RetriesView struct {
	Left int        `json:"left"`
	Next *time.Time `json:"next,omitempty"`
	Last time.Time  `json:"last"`
}

// PlatformRetries is rec's retry budget, for a failed key of a sync route
// whose platform publishes a schedule; nil otherwise.
func PlatformRetries(a *app.App, rec *store.Record, state string) *RetriesView {
	if state != string(store.StateFailed) && state != string(store.StateDead) {
		return nil
	}
	rt, ok := routeOf(a, rec)
	if !ok || rt.Schedule == nil {
		return nil
	}
	est := rt.Schedule.Estimate(rec.LastSeen, rec.Copies, a.Now())
	v := &RetriesView{Left: est.Left, Last: apiTime(est.Last)}
	if !est.Next.IsZero() {
		t := apiTime(est.Next)
		v.Next = &t
	}
	return v
}

// SignatureView says what a redelivery of the record carries.
type SignatureView struct {
	// Resigned: a redelivery is signed afresh, with the current time, by
	// the gateway (it holds the route's signing secret).
	Resigned bool `json:"resigned"`
	// RefusedAfter: the platform's own signature goes, and a backend that
	// checks its signed time (WeChat Pay v3, PayPal: 5 minutes) refuses it
	// from then on.
	RefusedAfter *time.Time `json:"refused_after,omitempty"`
	Note         string     `json:"note"`
}

// RecordSignature is what a redelivery of rec would carry; nil for routes
// that do not verify signatures.
func RecordSignature(a *app.App, rec *store.Record) *SignatureView {
	return signatureOf(a, rec)
}

func signatureOf(a *app.App, rec *store.Record) *SignatureView {
	rt, ok := routeOf(a, rec)
	if !ok || rt.Platform == nil || rt.Platform.Name() == platforms.Default {
		return nil
	}
	switch {
	case rt.Resigns:
		return &SignatureView{Resigned: true, Note: "a redelivery is signed afresh with the current time over the same body"}
	case rt.SignedFor > 0:
		// From the platform's signed time (Wechatpay-Timestamp,
		// PAYPAL-TRANSMISSION-TIME), which the backend's check counts
		// from, not from receipt.
		t := apiTime(signedTimeOf(rt, rec).Add(rt.SignedFor))
		return &SignatureView{RefusedAfter: &t, Note: "the platform's own signature is sent: a backend that checks its signed time " +
			"refuses it " + rt.SignedFor.String() + " after the platform signed it"}
	}
	return &SignatureView{Note: "the platform's own signature is sent; it carries no time a backend could refuse it by"}
}

// signedTimeOf is when the platform signed rec's journaled notification,
// as its preset reads it from the headers; the first receipt when it
// names no time (or the journal holds no notification).
func signedTimeOf(rt *app.Route, rec *store.Record) time.Time {
	if p := platforms.Lookup(rt.Platform.Name()); p != nil && rec.Notification != nil {
		if t, ok := p.SignedTime(rec.Notification.Header); ok {
			return t
		}
	}
	return rec.FirstSeen
}
