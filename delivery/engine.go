package delivery

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/store"
)

// The delivery engine of one async route: `concurrency` workers take
// deliveries from the scope's queue (the queue enforces concurrency and
// rate across every instance) and send each to the backend, settling the
// key's claim by the outcome as the synchronous path does. It starts when
// the route starts and stops at its cleanup; on a reload the new route's
// engine starts before the old one stops, and both take from the one
// queue for a moment, within its limits.

const (
	// MaxTakeWait bounds a worker's sleep between takes, so a delivery
	// enqueued on another instance waits at most this long.
	MaxTakeWait = 200 * time.Millisecond
	// stopGrace is how long Stop lets deliveries in flight finish before
	// cutting them off (they are then settled as ambiguous).
	stopGrace = 10 * time.Second
	// statsEvery refreshes the queue gauges.
	statsEvery = 2 * time.Second
	// maxDeliveryAnswer bounds the answer body read from the backend
	// beyond what is remembered: it is read to the end to know the answer
	// is whole.
	maxDeliveryAnswer = 64 << 20
	// sendAlign: on a scope with a rate, each delivery is sent this long
	// after its take began. The queue counts a start when it hands the
	// delivery out; were the send to follow after a varying time (the
	// Start's round trip, a busy moment), a late one would land in the
	// next second as the backend sees it, and the backend would see more
	// than the rate. A fixed delay shifts every start alike.
	sendAlign = 15 * time.Millisecond
)

// Config is an async route's settings, resolved (defaults filled,
// checked) by the adapter.
type Config struct {
	Scope    string // the namespace of the route's keys, and its queue
	Platform string // the route's platform, for logs and the admin API
	// To is the backend: a notification's path and query are appended to
	// its path, as reverse_proxy does.
	To                *url.URL
	Concurrency, Rate int
	// RetryInitial and RetryMax bound the back-off between failed
	// attempts; GiveUp is how long after its receipt a failing
	// notification is given up (its key is then dead).
	RetryInitial, RetryMax, GiveUp time.Duration
	LockTTL                        time.Duration // a claim's and a lease's life without renewal
	TTL                            time.Duration // an answer's and a journal's life
	StoreTimeout                   time.Duration // bounds each store call
	MaxAnswer                      int64         // the answer body remembered
	Ceiling                        time.Duration // bounds one attempt
	// SignedFor is how long after the platform signed it a backend's own
	// check refuses a notification (keying.Preset.SignedFor), for the
	// dead key's reason.
	SignedFor time.Duration
	Logger    *zap.Logger
	// Observer is told of attempts, troubles and events; nil: none.
	Observer Observer
}

// Route is what the engine asks of the route it delivers for: its
// store, its journal cut and how it judges and re-signs a delivery. Its
// methods are read at each call: the store is set when the route starts.
type Route interface {
	// Store and Settler are where the claims and answers live.
	Store() store.Store
	Settler() *store.Settler
	// Ackable says why the route's acks are refused now (its store would
	// lose them on a restart), or nil.
	Ackable() error
	// Received is r, won by c, as queued (the body whole, as the gate
	// read it: c.Body), and the caller's credentials the backend is still
	// owed.
	Received(r *http.Request, c gate.Claim) (n *store.Notification, credentials http.Header)
	// Journaled is n as the journal keeps it (nil: none kept).
	Journaled(n *store.Notification) *store.Notification
	// Success judges a backend's answer by the route's success rule.
	Success(method string, status int, header http.Header, body []byte) bool
	// ReplayHeader is the part of an answer's header a replay sends again.
	ReplayHeader(h http.Header) http.Header
	// Resign signs a delivery afresh over body where the route holds the
	// signing secret; false: it cannot, the platform's own signature goes.
	Resign(hdr http.Header, body []byte) (resigned bool, err error)
	// RefusedAfter is when a backend checking the platform's signed time
	// refuses a notification received at received; zero: never (the
	// platform signs no time, or the route does not verify).
	RefusedAfter(hdr http.Header, received time.Time) time.Time
}

// Observer is what the engine reports to: the route's metrics, logs and
// events. Config.Observer; nil is NopObserver.
type Observer interface {
	// ClaimTrouble reports a claim that could not be settled or renewed;
	// store.ErrNotOwner: it was lost.
	ClaimTrouble(key, op string, err error)
	// Emit sends an event about key (idempotency.failed, .dead, ...).
	Emit(event, key string, status int, attempts int64)
	// Delivered, Dead and StoreError count an attempt, a key given up and
	// a failed store operation.
	Delivered(outcome string, took time.Duration)
	Dead()
	StoreError(op string)
	// LogKey is key as it may appear in logs.
	LogKey(key string) string
}

// NopObserver reports nothing; its LogKey is the key as it is.
type NopObserver struct{}

func (NopObserver) ClaimTrouble(string, string, error) {}
func (NopObserver) Emit(string, string, int, int64)    {}
func (NopObserver) Delivered(string, time.Duration)    {}
func (NopObserver) Dead()                              {}
func (NopObserver) StoreError(string)                  {}
func (NopObserver) LogKey(key string) string           { return key }

// Engine is one async route's delivery engine, and its receipt
// (gate.Queue).
type Engine struct {
	cfg    Config
	rt     Route
	obs    Observer
	logger *zap.Logger
	lim    store.QueueLimits
	queue  store.Queue // the store's delivery queue

	client *http.Client
	wake   chan struct{}
	states keyStates // what this engine does with each key (keys.go)

	takeCtx    context.Context // done: take nothing more
	stopTaking context.CancelFunc
	sendCtx    context.Context // done: cut deliveries in flight off
	abortSends context.CancelFunc
	wg         sync.WaitGroup
	stopOnce   sync.Once

	stats      atomic.Pointer[store.QueueStats]
	takeLogged atomic.Int64 // when a take error was last logged (unix ns)
}

// New builds the engine of an async route, which delivers q (the route's
// store's queue); Start runs it.
func New(cfg Config, rt Route, q store.Queue) *Engine {
	e := &Engine{cfg: cfg, rt: rt, obs: cfg.Observer, logger: cfg.Logger, queue: q,
		lim:  store.QueueLimits{Concurrency: cfg.Concurrency, Rate: cfg.Rate, Lease: cfg.LockTTL},
		wake: make(chan struct{}, cfg.Concurrency)}
	if e.logger == nil {
		e.logger = zap.NewNop()
	}
	if e.obs == nil {
		e.obs = NopObserver{}
	}
	e.takeCtx, e.stopTaking = context.WithCancel(context.Background())
	e.sendCtx, e.abortSends = context.WithCancel(context.Background())
	e.client = &http.Client{
		// A redirect is the backend's answer, not a place to re-send the
		// notification to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: cfg.Concurrency,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
	return e
}

// Start runs the workers and the stats refresher.
func (e *Engine) Start() {
	for range e.cfg.Concurrency {
		e.wg.Add(1)
		go e.work()
	}
	e.wg.Add(1)
	go e.refreshStats()
}

// Stop takes nothing more, lets the deliveries in flight finish (cut off
// after stopGrace) and settle, and returns once every worker is gone.
func (e *Engine) Stop() {
	e.stopOnce.Do(func() {
		e.stopTaking()
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopGrace):
			e.logger.Warn("deliveries still in flight at shutdown: cut off, settled as ambiguous", zap.String("scope", e.cfg.Scope))
			e.abortSends()
			<-done
		}
		e.abortSends()
		e.client.CloseIdleConnections()
	})
}

// LeftQueued warns of the deliveries the scope's queue still holds once
// no async route of the scope runs in this process (the adapter knows):
// nothing here delivers them any more. They wait in the store for a
// gateway that runs one.
func (e *Engine) LeftQueued() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StoreTimeout)
	defer cancel()
	st, err := e.queue.Stats(ctx, e.cfg.Scope)
	if err != nil || st.Depth == 0 {
		return
	}
	e.logger.Warn("no async route of this scope runs here any more: its queued deliveries wait in the store "+
		"until a gateway with one runs (the memory store loses them with the process)",
		zap.String("scope", e.cfg.Scope), zap.Int64("queued", st.Depth), zap.Time("oldest", st.Oldest))
}

// The engine as the admin API and the console see it.

// Scope is the scope whose queue the engine delivers.
func (e *Engine) Scope() string { return e.cfg.Scope }

// Platform names the route's platform.
func (e *Engine) Platform() string { return e.cfg.Platform }

// Target is the backend's URL, without credentials.
func (e *Engine) Target() string { return e.cfg.To.Redacted() }

// Queue is the store's delivery queue.
func (e *Engine) Queue() store.Queue { return e.queue }

// QueueStats are the queue's stats as refreshStats last read them, for
// the queue gauges.
func (e *Engine) QueueStats() (store.QueueStats, bool) {
	if st := e.stats.Load(); st != nil {
		return *st, true
	}
	return store.QueueStats{}, false
}

// Poke wakes a worker: deliveries may be due (one was just enqueued
// here, or the queue resumed).
func (e *Engine) Poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// work is one worker: take, deliver, repeat.
func (e *Engine) work() {
	defer e.wg.Done()
	for e.takeCtx.Err() == nil {
		took := time.Now()
		ctx, cancel := context.WithTimeout(e.takeCtx, e.cfg.StoreTimeout)
		d, wait, err := e.queue.Take(ctx, e.cfg.Scope, e.lim)
		cancel()
		if err != nil {
			if e.takeCtx.Err() != nil {
				return
			}
			e.takeTrouble(err)
			wait = MaxTakeWait
		}
		if d != nil {
			e.deliver(d, took)
			continue
		}
		t := time.NewTimer(min(max(wait, time.Millisecond), MaxTakeWait))
		select {
		case <-t.C:
		case <-e.wake:
		case <-e.takeCtx.Done():
		}
		t.Stop()
	}
}

// takeTrouble logs a failed take, at most once every 10s per engine.
func (e *Engine) takeTrouble(err error) {
	e.obs.StoreError("take")
	now := time.Now().UnixNano()
	if last := e.takeLogged.Load(); now-last < int64(10*time.Second) || !e.takeLogged.CompareAndSwap(last, now) {
		return
	}
	e.logger.Error("cannot take deliveries from the queue", zap.String("scope", e.cfg.Scope), zap.Error(err))
}

// refreshStats keeps the queue's stats for the gauges.
func (e *Engine) refreshStats() {
	defer e.wg.Done()
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.takeCtx, e.cfg.StoreTimeout)
		if st, err := e.queue.Stats(ctx, e.cfg.Scope); err == nil {
			e.stats.Store(&st)
		}
		cancel()
		select {
		case <-e.takeCtx.Done():
			return
		case <-t.C:
		}
	}
}

// hold is how long a queued key's claim is held at receipt: long enough
// for every attempt until give_up, the last back-off, and a lease's
// take-over.
func (e *Engine) hold() time.Duration {
	return e.cfg.GiveUp + e.cfg.RetryMax + 2*e.cfg.LockTTL
}
