package admin

import (
	"time"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/internal/registry"
	"github.com/idemgate/idemgate/platforms"
)

// The states of a deliver async route's key that the store keeps in
// flight (its claim is held while the notification is queued): the
// platform has its ack, and the gateway delivers it.
const (
	// StateQueued: waiting for its turn in the queue.
	StateQueued = "queued"
	// StateRetrying: an attempt failed; the next one is due at
	// next_attempt (when this instance holds it).
	StateRetrying = "retrying"
	// StateDelivering: a gateway is sending it to the backend now.
	StateDelivering = "delivering"
)

// KeyState is a record's state as the operator surfaces name it now.
type KeyState struct {
	State       string
	NextAttempt time.Time
	// Async: the key's route delivers from its queue: the platform has
	// its ack and retries nothing.
	Async bool
}

// StateOf reads a record's state now: the store's; dead once the
// platform's retry window (async: give_up) since the first copy has
// passed; and for an async route's key in flight, queued, retrying or
// delivering, as this process's engine knows it (a key another instance
// holds reads queued, or retrying once it has failed attempts).
func StateOf(app *registry.App, rec *cache.Record) KeyState {
	rt, ok := routeOf(app, rec)
	window := time.Duration(0)
	if ok {
		window = rt.RetryWindow
	}
	ks := KeyState{State: string(rec.StateAt(app.Now(), window)), Async: ok && rt.Async}
	if !ks.Async || rec.State != cache.StateInFlight {
		return ks
	}
	ks.State = StateQueued
	if n := len(rec.Attempts); n > 0 && !rec.Attempts[n-1].Start.Before(rec.Changed.Truncate(time.Millisecond)) {
		// An attempt since the key was claimed (and queued): a retry is
		// due. Attempts from before (a redelivered dead key's) do not
		// count.
		ks.State = StateRetrying
	}
	if e, ok := app.EngineOf(rt.Scope); ok {
		if kd, ok := e.KeyState(rec.Key); ok {
			switch {
			case kd.Delivering:
				ks.State = StateDelivering
			case !kd.NextAttempt.IsZero():
				ks.State, ks.NextAttempt = StateRetrying, kd.NextAttempt
			}
		}
	}
	return ks
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
func PlatformRetries(app *registry.App, rec *cache.Record, state string) *RetriesView {
	if state != string(cache.StateFailed) && state != string(cache.StateDead) {
		return nil
	}
	rt, ok := routeOf(app, rec)
	if !ok || rt.Schedule == nil {
		return nil
	}
	est := rt.Schedule.Estimate(rec.LastSeen, rec.Copies, app.Now())
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
func RecordSignature(app *registry.App, rec *cache.Record) *SignatureView {
	return signatureOf(app, rec)
}

func signatureOf(app *registry.App, rec *cache.Record) *SignatureView {
	rt, ok := routeOf(app, rec)
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
func signedTimeOf(rt *registry.Route, rec *cache.Record) time.Time {
	if p := platforms.Lookup(rt.Platform.Name()); p != nil && rec.Notification != nil {
		if t, ok := p.SignedTime(rec.Notification.Header); ok {
			return t
		}
	}
	return rec.FirstSeen
}
