package caddymodule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/internal/cfparse"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() {
	httpcaddyfile.RegisterDirective("idempotency", parseDirective)
	// Registered in code so no global `order` is needed: the gateway must
	// decide before the request is proxied.
	httpcaddyfile.RegisterDirectiveOrder("idempotency", httpcaddyfile.Before, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Handler
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	idempotency [<matcher>] {
//		platform  generic | alipay | wechatpay | wechatpay_v2 | stripe | paypal | standard_webhooks
//		<the platform's own subdirectives, parsed by its module: secret,
//		 public_key, public_key_id, certificate, webhook_id, app_id, mchid,
//		 return …>
//		key       <template>
//		fingerprint <template> | off
//		store     embedded [<path>] | memory | redis <address|redis-url>... {
//			master_name <name>
//			username    <user>
//			password    <password>
//			db          <n>
//			tls
//			prefix      <prefix>
//			pool_size   <n>
//			wait_replicas <n> [<timeout>]
//			allow_eviction
//		}
//		lock_ttl  <duration>
//		ttl       <duration>
//		order_ttl <duration>
//		in_flight wait <duration> | reject
//		on_store_error fail_closed | pass
//		store_timeout <duration>
//		max_body  <size>
//		max_answer <size>
//		success   <status|class>... [body <text>] [header <field> <value>]...
//		on_duplicate redirect <template> | respond <status> [<body>]
//		verify off
//		tolerance     <duration>
//		scope         <name>
//		log_keys
//		warn_copies <n>
//		deliver   sync | async {
//			to          <url>
//			ack         <status> [<body>]
//			concurrency <n>
//			rate        <n>/s
//			retry       <initial> <max>
//			give_up     <duration>
//			durability  replicas <n> | volatile
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	var pending []*caddyfile.Dispenser
	if err := cfparse.Block(d, 0, "", func(name string) error { return h.unmarshalSubdirective(d, name, &pending) }); err != nil {
		return err
	}
	if h.Platform != "" || len(pending) > 0 {
		mod, err := unmarshalPlatform(h.Platform, pending)
		if err != nil {
			return err
		}
		h.mod, h.PlatformRaw = mod, caddyconfig.JSONModuleObject(mod, "name", mod.CaddyModule().ID.Name(), nil)
	}
	if err := h.checkPlaceholders(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// unmarshalSubdirective reads one subdirective and its arguments; one
// the handler does not know is kept in pending for the platform's module.
func (h *Handler) unmarshalSubdirective(d *caddyfile.Dispenser, name string, pending *[]*caddyfile.Dispenser) error {
	switch name {
	case "platform":
		if err := cfparse.OneArg(d, &h.Platform); err != nil {
			return err
		}
		if err := checkPlatform(h.Platform); err != nil {
			return d.Err(err.Error())
		}
		return nil
	case "key":
		return cfparse.OneArg(d, &h.Key)
	case "fingerprint":
		return cfparse.OneArg(d, &h.Fingerprint)
	case "store":
		var err error
		h.Store, err = parseStore(d)
		return err
	case "lock_ttl":
		return cfparse.DurationArg(d, &h.LockTTL)
	case "ttl":
		return cfparse.DurationArg(d, &h.TTL)
	case "order_ttl":
		return cfparse.DurationArg(d, &h.OrderTTL)
	case "store_timeout":
		return cfparse.DurationArg(d, &h.StoreTimeout)
	case "in_flight":
		return h.parseInFlight(d)
	case "on_store_error":
		if err := cfparse.OneArg(d, &h.OnStoreError); err != nil {
			return err
		}
		if h.OnStoreError != "fail_closed" && h.OnStoreError != "pass" {
			return d.Errf("on_store_error: want fail_closed or pass, got %q", h.OnStoreError)
		}
		return nil
	case "max_body":
		return cfparse.SizeArg(d, &h.MaxBody)
	case "max_answer":
		return cfparse.SizeArg(d, &h.MaxAnswer)
	case "journal_body":
		return journalBodyArg(d, &h.JournalBody)
	case "deliver":
		var err error
		h.Deliver, err = parseDeliver(d)
		return err
	case "alert":
		var err error
		h.Alert, err = parseAlert(d)
		return err
	case "catch_up":
		var err error
		h.CatchUp, err = parseCatchUp(d)
		return err
	case "success":
		var err error
		h.Success, err = parseSuccess(d)
		return err
	case "on_duplicate":
		var err error
		h.OnDuplicate, err = parseOnDuplicate(d)
		return err
	case "verify":
		var v string
		if err := cfparse.OneArg(d, &v); err != nil {
			return err
		}
		if v != "off" {
			return d.Errf("verify: only `verify off` can be written (verification is on by default)")
		}
		h.VerifyOff = true
		return nil
	case "tolerance":
		return cfparse.DurationArg(d, &h.Tolerance)
	case "scope":
		if err := cfparse.OneArg(d, &h.Scope); err != nil {
			return err
		}
		if err := validScope(h.Scope); err != nil {
			return d.Errf("%v", err)
		}
		return nil
	case "log_keys":
		h.LogKeys = true
		return cfparse.NoArgs(d)
	case "warn_copies":
		var s string
		if err := cfparse.OneArg(d, &s); err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return d.Errf("warn_copies: want a positive number, got %q", s)
		}
		h.WarnCopies = n
		return nil
	}
	// The platform's own settings: its module parses them once the block
	// has named the platform (unmarshalPlatform).
	*pending = append(*pending, d.NewFromNextSegment())
	return nil
}

// unmarshalPlatform is a module of the platform named name ("" is
// generic) given the subdirectives the handler does not know, in the
// order written; the handler keeps it as the route's "platform" (its
// settings beside its name). A subdirective no module takes is unknown;
// one another platform takes is that platform's.
func unmarshalPlatform(name string, pending []*caddyfile.Dispenser) (guest.Module, error) {
	if name == "" {
		name = platforms.Default
	}
	mod, err := newPlatformModule(name)
	if err != nil {
		return nil, err
	}
	for _, seg := range pending {
		seg.Next()
		sub := seg.Val()
		handled := false
		if u, ok := mod.(guest.Subdirectives); ok {
			if handled, err = u.UnmarshalSubdirective(seg, sub); err != nil {
				return nil, err
			}
		}
		if !handled {
			others, err := platformsTaking(seg, sub)
			if err != nil {
				return nil, err // its arguments are wrong whichever platform it is for
			}
			if len(others) > 0 {
				return nil, seg.Errf("%s: %s is for %s only", name, sub, strings.Join(others, " and "))
			}
			return nil, seg.Errf("unknown subdirective %q", sub)
		}
	}
	return mod, nil
}

// newPlatformModule is a fresh module of the platform named name.
func newPlatformModule(name string) (guest.Module, error) {
	info, err := caddy.GetModule(string(guest.ID(name)))
	if err != nil {
		return nil, checkPlatform(name)
	}
	mod, ok := info.New().(guest.Module)
	if !ok {
		return nil, fmt.Errorf("module %s is not a platform", info.ID)
	}
	return mod, nil
}

// platformsTaking names the platforms whose module takes subdirective
// sub (seg positioned on it), sorted, or the error one of them finds in
// its arguments.
func platformsTaking(seg *caddyfile.Dispenser, sub string) ([]string, error) {
	var names []string
	for _, info := range caddy.GetModules(guest.Namespace) {
		u, ok := info.New().(guest.Subdirectives)
		if !ok {
			continue
		}
		seg.Reset()
		seg.Next()
		handled, err := u.UnmarshalSubdirective(seg, sub)
		if err != nil {
			return nil, err
		}
		if handled {
			names = append(names, info.ID.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// parseInFlight reads `in_flight wait [<duration>] | reject`.
func (h *Handler) parseInFlight(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.InFlight = d.Val()
	switch h.InFlight {
	case "wait":
		if d.NextArg() {
			dur, err := cfparse.Duration(d)
			if err != nil {
				return err
			}
			h.InFlightWait = dur
		}
	case "reject":
	default:
		return d.Errf("in_flight: want wait [<duration>] or reject, got %q", h.InFlight)
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

func parseStore(d *caddyfile.Dispenser) (*StoreConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	sc := &StoreConfig{Type: d.Val()}
	args := d.RemainingArgs()
	switch sc.Type {
	case "embedded":
		if len(args) > 1 {
			return nil, d.ArgErr()
		}
		if len(args) == 1 {
			sc.Path = args[0]
		}
	case "memory":
		if len(args) > 0 {
			return nil, d.ArgErr()
		}
	case "redis":
		sc.Addresses = args
		if len(args) == 0 {
			return nil, d.Errf("store redis: want at least one address or redis:// URL")
		}
	default:
		return nil, d.Errf("store: want embedded, memory or redis, got %q", sc.Type)
	}
	err := cfparse.Block(d, d.Nesting(), "store redis", func(name string) error {
		if sc.Type != "redis" {
			return d.Errf("store %s takes no options", sc.Type)
		}
		return sc.unmarshalOption(d, name)
	})
	if err != nil {
		return nil, err
	}
	// What a placeholder hides is checked at provision, once resolved.
	if !strings.Contains(strings.Join(sc.Addresses, " "), "{") {
		if err := sc.check(); err != nil {
			return nil, d.Errf("store: %v", err)
		}
	}
	return sc, nil
}

// unmarshalOption reads one option of a `store redis` block.
func (sc *StoreConfig) unmarshalOption(d *caddyfile.Dispenser, name string) error {
	switch name {
	case "master_name":
		return cfparse.OneArg(d, &sc.MasterName)
	case "username":
		return cfparse.OneArg(d, &sc.Username)
	case "password":
		return cfparse.OneArg(d, &sc.Password)
	case "prefix":
		return cfparse.OneArg(d, &sc.Prefix)
	case "tls":
		sc.TLS = true
		return cfparse.NoArgs(d)
	case "allow_eviction":
		sc.AllowEviction = true
		return cfparse.NoArgs(d)
	case "wait_replicas":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return d.Errf("store redis: wait_replicas <n> [<timeout>]")
		}
		r, err := strconv.Atoi(args[0])
		if err != nil || r < 1 {
			return d.Errf("store redis: wait_replicas wants a positive number, got %q", args[0])
		}
		sc.WaitReplicas = r
		if len(args) == 2 {
			dur, err := caddy.ParseDuration(args[1])
			if err != nil || dur <= 0 {
				return d.Errf("store redis: bad wait_replicas timeout %q", args[1])
			}
			sc.WaitTimeout = caddy.Duration(dur)
		}
		return nil
	case "db", "pool_size":
		var v string
		if err := cfparse.OneArg(d, &v); err != nil {
			return err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return d.Errf("store redis: %s wants a number, got %q", name, v)
		}
		if name == "db" {
			sc.DB = n
		} else {
			sc.PoolSize = n
		}
		return nil
	}
	return d.Errf("store redis: unknown option %q", name)
}

// parseSuccess reads `success <status|class>... [body <text>] [header
// <field> <value>]...`.
func parseSuccess(d *caddyfile.Dispenser) (*SuccessRule, error) {
	rule := &SuccessRule{}
	for d.NextArg() {
		switch d.Val() {
		case "body":
			if !d.NextArg() {
				return nil, d.Errf("success: body wants a text")
			}
			if rule.Body != "" {
				return nil, d.Errf("success: body given twice")
			}
			rule.Body = d.Val()
			continue
		case "header":
			if !d.NextArg() {
				return nil, d.Errf("success: header wants a field and a value")
			}
			field := d.Val()
			if !d.NextArg() {
				return nil, d.Errf("success: header %s wants a value", field)
			}
			if rule.Header == nil {
				rule.Header = map[string]string{}
			}
			rule.Header[field] = d.Val()
			continue
		}
		if rule.Body != "" || rule.Header != nil {
			return nil, d.Errf("success: statuses come first, then body and header (%q)", d.Val())
		}
		rule.Statuses = append(rule.Statuses, d.Val())
	}
	if len(rule.Statuses) == 0 {
		return nil, d.Errf("success: want at least one status or class (200, 2xx)")
	}
	if _, err := rule.compile(); err != nil {
		return nil, d.Errf("success: %v", err)
	}
	return rule, nil
}

// parseOnDuplicate reads `on_duplicate redirect <template> | respond <status> [<body>]`.
func parseOnDuplicate(d *caddyfile.Dispenser) (*DuplicateAction, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	a := &DuplicateAction{}
	switch d.Val() {
	case "redirect":
		if !d.NextArg() {
			return nil, d.Errf("on_duplicate redirect wants a URL template")
		}
		a.Redirect = d.Val()
	case "respond":
		if !d.NextArg() {
			return nil, d.Errf("on_duplicate respond wants a status")
		}
		st, err := strconv.Atoi(d.Val())
		if err != nil || st < 100 || st > 999 {
			return nil, d.Errf("on_duplicate respond: bad status %q", d.Val())
		}
		a.Status = st
		if d.NextArg() {
			a.Body = d.Val()
		}
	default:
		return nil, d.Errf("on_duplicate: want redirect or respond, got %q", d.Val())
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return a, nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)
