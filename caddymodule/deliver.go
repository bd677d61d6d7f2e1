package caddymodule

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/store"
)

// `deliver async`: the gateway answers the platform (the ack) once the
// notification is durable in the store's delivery queue, and a delivery
// engine (package delivery) takes it from there to the backend. This file
// holds the configuration and its provisioning (the store's durability
// checks are delivery.Durability's); deliver_adapter.go builds the engine
// and attaches it.

// DeliverConfig says how a notification reaches the backend.
type DeliverConfig struct {
	// Mode is "sync" (the default: the first copy is forwarded to the next
	// handler and the platform gets the backend's answer) or "async" (the
	// platform gets Ack as soon as the notification is queued; the gateway
	// delivers it to To itself).
	Mode string `json:"mode,omitempty"`
	// To is the backend's URL (async): the notification's path and query
	// are appended to its path, as reverse_proxy does. Required.
	To string `json:"to,omitempty"`
	// Ack is what the platform is answered once the notification is
	// queued. Presets know theirs (Alipay `success`, WeChat Pay v2's
	// SUCCESS XML, 200 for the rest); generic routes must write one.
	Ack *AckAnswer `json:"ack,omitempty"`
	// Concurrency bounds the deliveries of this scope in flight at once,
	// all gateway instances together. Default: 4.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate bounds the deliveries started per second, all instances
	// together; 0 (the default) is unlimited.
	Rate int `json:"rate,omitempty"`
	// RetryInitial and RetryMax bound the back-off between failed attempts
	// (exponential, with full jitter). Defaults: 1s and 10m.
	RetryInitial caddy.Duration `json:"retry_initial,omitempty"`
	RetryMax     caddy.Duration `json:"retry_max,omitempty"`
	// GiveUp is how long after its receipt a notification that keeps
	// failing is given up: its key is then dead. Default: 24h.
	GiveUp caddy.Duration `json:"give_up,omitempty"`
	// Replicas (Redis): the ack waits until this many replicas have the
	// notification. The store's wait_replicas must be at least this.
	Replicas int `json:"replicas,omitempty"`
	// Volatile (`durability volatile`) accepts a Redis store without AOF.
	// An ack is a promise: the platform, answered, never sends the
	// notification again, so until it is delivered it lives only in the
	// store. On a Redis with appendonly no, a Redis restart loses it with
	// no record. Without Volatile an async route on Redis therefore needs
	// appendonly yes on every master: it refuses to start when a master
	// has it off, and while a later check finds it off its acks fail
	// closed (503 + Retry-After, the platform retries) until it is back.
	// appendfsync everysec or no is a start-up warning (a host crash can
	// lose the last second's, or the operating system's flush interval's,
	// acks). Other stores ignore it.
	Volatile bool `json:"volatile,omitempty"`
}

// AckAnswer is the answer a platform gets for a queued notification.
type AckAnswer struct {
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
	// ContentType of Body; default: guessed from it (XML, JSON or text).
	ContentType string `json:"content_type,omitempty"`
}

// deliveryState is an async handler's runtime: its ack, its engine's
// settings, and the engine once the route starts.
type deliveryState struct {
	ack AckAnswer
	cfg async.Config
	// giveUp and concurrency are cfg's, for the journal's retry window
	// and redelivery.
	giveUp      time.Duration
	concurrency int
	// engine is set by start, before the route's started is.
	engine *asyncEngine
	// durable is the route's look at its store's persistence: a Redis
	// without AOF refuses its acks (delivery.Durability).
	durable *async.Durability
}

// async reports whether this route delivers asynchronously.
func (h *Handler) async() bool { return h.dlv != nil }

// provisionDeliver resolves `deliver`: nothing for sync, the engine's
// settings for async. It runs after the store is loaded.
func (h *Handler) provisionDeliver() error {
	c := h.Deliver
	if c == nil || c.Mode == "" || c.Mode == "sync" {
		return nil
	}
	if c.Mode != "async" {
		return fmt.Errorf("deliver: mode must be sync or async, not %q", c.Mode)
	}
	if c.To == "" {
		return fmt.Errorf("deliver async: needs `to <url>` (the backend)")
	}
	u, err := url.Parse(caddy.NewReplacer().ReplaceKnown(c.To, ""))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("deliver async: to must be an http:// or https:// URL, not %q", c.To)
	}
	ds := &deliveryState{durable: &async.Durability{Volatile: c.Volatile, Scope: h.scope(), Logger: h.logger}}
	if c.Ack != nil {
		ds.ack = *c.Ack
	} else if a := h.preset().Ack; a.Status != 0 {
		ds.ack = AckAnswer(a)
	} else {
		return fmt.Errorf("deliver async: a %s route needs `ack <status> [<body>]`: what the platform takes as received", h.Platform)
	}
	if ds.ack.Status < 200 || ds.ack.Status > 299 {
		return fmt.Errorf("deliver async: ack status must be 2xx, not %d", ds.ack.Status)
	}
	if ds.ack.ContentType == "" && ds.ack.Body != "" {
		ds.ack.ContentType = async.AckContentType(ds.ack.Body)
	}
	dc := h.deliveryConfig(u)
	if err := dc.Check(); err != nil {
		return err
	}
	if h.OnStoreError == "pass" {
		return fmt.Errorf("deliver async: on_store_error pass cannot apply: a notification is acknowledged only once it is queued in the store")
	}
	if c.Replicas > 0 {
		if h.storeConf.Type != "redis" {
			return fmt.Errorf("deliver async: durability replicas is for a redis store (this route's store is %s)", h.storeConf.Type)
		}
		if h.storeConf.WaitReplicas < c.Replicas {
			return fmt.Errorf("deliver async: durability replicas %d needs the redis store's wait_replicas to be at least %d "+
				"(the store WAITs on that many replicas on every write, the queue's included); it is %d",
				c.Replicas, c.Replicas, h.storeConf.WaitReplicas)
		}
	}
	// Routes of one scope share its queue: in one config they must
	// deliver it alike, or each delivery goes wherever a worker of either
	// route happens to take it. (A reload's route may differ from the one
	// it replaces, whose engine stops.)
	for _, o := range h.siblings() {
		if o.dlv == nil || o.scope() != h.scope() {
			continue
		}
		if oc := o.dlv.cfg; oc.To.String() != u.String() || oc.Concurrency != dc.Concurrency || oc.Rate != dc.Rate {
			return fmt.Errorf("deliver async: scope %q is already delivered by another route of this config, to %s "+
				"(concurrency %d, rate %d/s): routes of one scope share its queue, so they must deliver it alike; "+
				"give this route a `scope` of its own, or the same `to`, `concurrency` and `rate`",
				h.scope(), oc.To, oc.Concurrency, oc.Rate)
		}
	}
	ds.cfg, ds.giveUp, ds.concurrency = dc, dc.GiveUp, dc.Concurrency
	h.dlv = ds
	return nil
}

// deliveryConfig is the engine's settings: `deliver async`'s, defaults
// filled (delivery.Config.Defaults), and the route's.
func (h *Handler) deliveryConfig(to *url.URL) async.Config {
	c := h.Deliver
	dc := async.Config{Scope: h.scope(), Platform: h.Platform, To: to, Concurrency: c.Concurrency, Rate: c.Rate,
		RetryInitial: time.Duration(c.RetryInitial), RetryMax: time.Duration(c.RetryMax), GiveUp: time.Duration(c.GiveUp),
		LockTTL: time.Duration(h.LockTTL), TTL: time.Duration(h.TTL), StoreTimeout: time.Duration(h.StoreTimeout),
		MaxAnswer: h.MaxAnswer, Ceiling: h.opts.backendCeiling(), SignedFor: h.preset().SignedFor, Logger: h.logger}
	return dc.Defaults()
}

// startDeliver takes the store's queue and starts the engine; start runs
// it once the store is open.
func (h *Handler) startDeliver() error {
	q, ok := h.store.(store.Queuer)
	if !ok {
		return fmt.Errorf("deliver async: the %s store holds no delivery queue", h.storeConf.Type)
	}
	if err := h.dlv.durable.Check(async.LastCheck(h.store)); err != nil {
		return err
	}
	cfg := h.dlv.cfg
	cfg.Observer = h.obs
	h.dlv.engine = &asyncEngine{Engine: async.New(cfg, deliverRoute{h}, q.Queue()), h: h}
	h.dlv.engine.start()
	return nil
}

// fields name the route's delivery mode in its start-up line; ds is nil
// for sync.
func (ds *deliveryState) fields() []zap.Field {
	if ds == nil {
		return []zap.Field{zap.String("deliver", "sync")}
	}
	dc := ds.cfg
	f := []zap.Field{zap.String("deliver", "async"), zap.String("deliver_to", dc.To.Redacted()),
		zap.Int("concurrency", dc.Concurrency), zap.Int("rate", dc.Rate), zap.Duration("give_up", dc.GiveUp)}
	if ds.durable.Volatile {
		f = append(f, zap.String("durability", "volatile"))
	}
	return f
}

// parseDeliver reads `deliver sync | async { ... }`.
func parseDeliver(d *caddyfile.Dispenser) (*DeliverConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	c := &DeliverConfig{Mode: d.Val()}
	if c.Mode != "sync" && c.Mode != "async" {
		return nil, d.Errf("deliver: want sync or async, got %q", c.Mode)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	err := cfparse.Block(d, d.Nesting(), "deliver async", func(name string) error {
		if c.Mode == "sync" {
			return d.Errf("deliver sync takes no options")
		}
		return c.unmarshalOption(d, name)
	})
	if err != nil {
		return nil, err
	}
	if c.Mode == "async" && c.To == "" {
		return nil, d.Errf("deliver async: needs `to <url>` (the backend)")
	}
	return c, nil
}

func (c *DeliverConfig) unmarshalOption(d *caddyfile.Dispenser, name string) error {
	switch name {
	case "to":
		return cfparse.OneArg(d, &c.To)
	case "ack":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return d.Errf("deliver async: ack <status> [<body>]")
		}
		st, err := strconv.Atoi(args[0])
		if err != nil || st < 200 || st > 299 {
			return d.Errf("deliver async: ack status must be 2xx, got %q", args[0])
		}
		c.Ack = &AckAnswer{Status: st}
		if len(args) == 2 {
			c.Ack.Body = args[1]
		}
		return nil
	case "concurrency":
		return positiveArg(d, name, &c.Concurrency)
	case "rate":
		var s string
		if err := cfparse.OneArg(d, &s); err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSuffix(s, "/s"))
		if err != nil || n < 1 || !strings.HasSuffix(s, "/s") {
			return d.Errf("deliver async: rate wants <n>/s, got %q", s)
		}
		c.Rate = n
		return nil
	case "retry":
		args := d.RemainingArgs()
		if len(args) != 2 {
			return d.Errf("deliver async: retry <initial> <max>")
		}
		var ds [2]caddy.Duration
		for i, a := range args {
			v, err := caddy.ParseDuration(a)
			if err != nil || v <= 0 {
				return d.Errf("deliver async: bad retry duration %q", a)
			}
			ds[i] = caddy.Duration(v)
		}
		if ds[1] < ds[0] {
			return d.Errf("deliver async: retry max %s is shorter than initial %s", args[1], args[0])
		}
		c.RetryInitial, c.RetryMax = ds[0], ds[1]
		return nil
	case "give_up":
		return cfparse.DurationArg(d, &c.GiveUp)
	case "durability":
		args := d.RemainingArgs()
		if len(args) == 1 && args[0] == "volatile" {
			c.Volatile = true
			return nil
		}
		if len(args) != 2 || args[0] != "replicas" {
			return d.Errf("deliver async: durability replicas <n> | volatile")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 {
			return d.Errf("deliver async: durability replicas wants a number, got %q", args[1])
		}
		c.Replicas = n
		return nil
	}
	return d.Errf("deliver async: unknown option %q", name)
}

func positiveArg(d *caddyfile.Dispenser, name string, dst *int) error {
	var s string
	if err := cfparse.OneArg(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return d.Errf("deliver async: %s wants a positive number, got %q", name, s)
	}
	*dst = n
	return nil
}
