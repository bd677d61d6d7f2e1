package store

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"time"
)

// The delivery queue behind `deliver async`: the gateway acknowledges a
// notification once it is queued here, and a delivery engine takes it from
// the queue to the backend. The key's claim is held for the whole time the
// notification is queued (its token travels with the delivery), so every
// duplicate finds the key in flight and is acknowledged without a second
// delivery; the engine settles the claim (Complete, Leave, Release) with
// that token as the synchronous path does.
//
// A queue holds, per scope, the deliveries waiting (each due at a time) and
// those leased by a taker. A lease that is not extended runs out and the
// delivery is due again: a gateway that died mid-delivery is taken over.
// Limits (deliveries leased at once, starts per second) hold across every
// taker of the scope, on every gateway instance sharing the store.

// Delivery is one notification in a scope's queue. Key is the full key.
type Delivery struct {
	Key string
	// Token owns the key's claim while the delivery is queued.
	Token        string
	Notification *Notification
	Enqueued     time.Time
	// Attempts made so far; Retry sets it.
	Attempts int
	// Started: a taker marked an attempt started (Start) and never ended
	// it (Retry or Done): its gateway died or lost the lease mid-attempt,
	// so the backend may have run it. Take reports it.
	Started bool
	// Lease identifies the taker's lease (set by Take).
	Lease string
	// Order is what a successful delivery remembers in the key's order
	// (Answer.Order); nil for nothing.
	Order *OrderRun
	// Credentials are the request's credential headers as received
	// (Authorization, Cookie): a backend behind Basic auth or a token
	// needs them on every attempt. They live in the queue entry only,
	// never in the journal (Notification has them removed), and go when
	// the entry does.
	Credentials http.Header
}

// QueueLimits bound what Take hands out for a scope.
type QueueLimits struct {
	// Concurrency: deliveries leased at once, all takers together; 0 is
	// unlimited.
	Concurrency int
	// Rate: deliveries started in any RateWindow, all takers together; 0
	// is unlimited.
	Rate int
	// Lease: how long a taken delivery is the taker's before it is due
	// again, unless Extend renews it. Required.
	Lease time.Duration
}

// RateWindow is the window Rate counts starts over. It is a tenth over a
// second so that "Rate per second" still holds as the backend sees the
// starts: a delivery's request reaches it some time after its start was
// counted, and that time varies (a busy gateway, a garbage collection).
// With 20ms the backend saw 205 starts in a second at rate 200; the
// price of 100ms is a drain at about 0.9 × Rate.
const RateWindow = time.Second + 100*time.Millisecond

// QueueStats describes one scope's queue.
type QueueStats struct {
	// Depth counts the deliveries queued, leased ones included.
	Depth int64 `json:"depth"`
	// Leased counts those being delivered now.
	Leased int64 `json:"leased"`
	// Oldest is when the oldest queued delivery was enqueued (zero when
	// the queue is empty).
	Oldest time.Time `json:"oldest,omitzero"`
	Paused bool      `json:"paused"`
}

// Queue is the delivery queue. Scopes are independent queues.
type Queue interface {
	// Enqueue queues d, due now, and returns once it is durable. A key
	// already queued keeps its place, due time, attempts and lease; its
	// token becomes d's (the old claim ran out and d's copy won it again).
	// A leased one is not lost to its lease's end: its Done queues d as a
	// new delivery, due now (the taker settled the old one, then d's copy
	// won the key: an operator's redelivery), and its Retry makes it due
	// now. A lease that runs out only keeps d's token, as above.
	Enqueue(ctx context.Context, scope string, d Delivery) error
	// Queued reports whether key is queued (waiting or leased).
	Queued(ctx context.Context, scope, key string) (bool, error)
	// Take leases the delivery due earliest, if one is due and lim allows
	// another start. Otherwise it returns nil and how long to wait before
	// trying again (the scope is paused, at its limits, or nothing is due
	// yet).
	Take(ctx context.Context, scope string, lim QueueLimits) (*Delivery, time.Duration, error)
	// Start marks the leased delivery's attempt as started, before
	// anything is sent, so that a taker-over knows (Delivery.Started).
	// Retry and Done end it. ErrNotOwner as for Extend.
	Start(ctx context.Context, scope, key, lease string) error
	// Extend renews a lease for d from now. ErrNotOwner if the lease ran
	// out (the delivery may have been taken over) or the delivery is gone.
	Extend(ctx context.Context, scope, key, lease string, d time.Duration) error
	// Retry ends a lease: the delivery is due again at due (now if it was
	// enqueued again meanwhile), with attempts made so far. ErrNotOwner
	// as for Extend.
	Retry(ctx context.Context, scope, key, lease string, due time.Time, attempts int) error
	// Done removes a delivery whose lease is held, or replaces it with
	// the one enqueued meanwhile (see Enqueue). ErrNotOwner as for Extend.
	Done(ctx context.Context, scope, key, lease string) error
	// Remove drops key's delivery unless a taker holds it now (the
	// operator's purge of a queued notification): ErrNotFound when none is
	// queued, ErrNotOwner when it is being delivered.
	Remove(ctx context.Context, scope, key string) error
	// Pause stops Take from handing out deliveries of scope (on every
	// instance) until Resume; Enqueue goes on.
	Pause(ctx context.Context, scope string) error
	Resume(ctx context.Context, scope string) error
	// Stats describes scope's queue.
	Stats(ctx context.Context, scope string) (QueueStats, error)
}

// Queuer is a store that holds delivery queues too: async delivery
// (deliver: async) reads and writes them, the request path only enqueues
// through the route's engine. It is apart from Store because a claim
// never needs a queue, and the queue's methods are many and its own.
type Queuer interface {
	Queue() Queue
}

// errBadScope: scopes name keys and buckets; an empty one names nothing.
var errBadScope = errors.New("store: queue scope is empty")

// idleWait is how long Take asks a taker to wait when nothing is due and
// nothing says when something will be: an Enqueue elsewhere is seen
// within it.
const idleWait = 50 * time.Millisecond

// encodeDelivery is a delivery's stored form (the lease is not stored:
// it lives in memory or in its own key).
func encodeDelivery(d *Delivery, due time.Time) []byte {
	b := []byte{4}
	b = appendString(b, d.Key)
	b = appendString(b, d.Token)
	b = binary.AppendVarint(b, d.Enqueued.UnixMilli())
	b = binary.AppendVarint(b, int64(d.Attempts))
	b = binary.AppendVarint(b, due.UnixMilli())
	var n []byte
	if d.Notification != nil {
		n = encodeNotification(d.Notification)
	}
	b = appendBytes(b, n)
	started := byte(0)
	if d.Started {
		started = 1
	}
	b = append(b, started)
	// Version 3: the order run, after a presence byte.
	if d.Order == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendVarint(b, d.Order.TTL.Milliseconds())
		b = appendString(b, d.Order.Amount)
		b = appendString(b, d.Order.Currency)
	}
	// Version 4: the credentials.
	return appendHeader(b, d.Credentials)
}

func decodeDelivery(b []byte) (*Delivery, time.Time, error) {
	if len(b) == 0 || b[0] < 1 || b[0] > 4 {
		return nil, time.Time{}, errCorrupt
	}
	version := b[0]
	r := reader{b: b[1:]}
	d := &Delivery{Key: r.string(), Token: r.string()}
	d.Enqueued = time.UnixMilli(r.varint())
	d.Attempts = int(r.varint())
	due := time.UnixMilli(r.varint())
	n := r.bytes()
	if r.err != nil {
		return nil, time.Time{}, r.err
	}
	if version >= 2 && len(r.b) > 0 {
		d.Started = r.b[0] == 1
		r.b = r.b[1:]
	}
	if version >= 3 && r.byte() == 1 {
		d.Order = &OrderRun{TTL: time.Duration(r.varint()) * time.Millisecond, Amount: r.string(), Currency: r.string()}
		if r.err != nil {
			return nil, time.Time{}, r.err
		}
	}
	if version >= 4 {
		if h := r.header(); len(h) > 0 {
			d.Credentials = h
		}
		if r.err != nil {
			return nil, time.Time{}, r.err
		}
	}
	if len(n) > 0 {
		var err error
		if d.Notification, err = decodeNotification(n); err != nil {
			return nil, time.Time{}, err
		}
	}
	return d, due, nil
}

// Interface guards
var (
	_ Queuer = (*Memory)(nil)
	_ Queuer = (*Embedded)(nil)
	_ Queuer = (*Redis)(nil)
)
