// Package idemgate registers every piece of the idempotency gateway when
// imported, so a Caddy build adds it in one step:
//
//	xcaddy build --with github.com/idemgate/idemgate
//
// It brings the `idempotency` HTTP handler and directive
// (http.handlers.idempotency, package caddymodule), the platforms as its
// guest modules (http.handlers.idempotency.platforms.*), the app that
// holds a config's shared state (idempotency, caddymodule/app), the
// operator's console (http.handlers.idempotency_console,
// caddymodule/console), the admin API (admin.api.idempotency,
// caddymodule/admin) and the `idemgate idempotency …` CLI
// (caddymodule/command).
//
// # The map of the project
//
// This is the one map (docs/development.md points here). Which package
// owns what, and where a change of each kind goes:
//
//	idemgate (module root)   this package: blank-imports every module
//	                         package, so one --with brings all of it; Version
//	cmd/idemgate             main: Caddy's standard modules + the module root
//	gate                     the request path: parse, verify, claim, then
//	                         forward, replay, wait or refuse, then settle;
//	                         no Caddy
//	caddymodule              the `idempotency` handler around the gate and
//	                         its directive: templates, writing the gate's
//	                         outcome, the call to the next handler, and
//	                         where each feature attaches (its doc: by file)
//	caddymodule/app          the idempotency app (Caddy's App, ctx.App):
//	                         what the operator surfaces share with the
//	                         handlers while a config runs (routes by scope,
//	                         stores, delivery engines, the chart's counts,
//	                         the clock)
//	caddymodule/admin        admin.api.idempotency: one route table over a
//	                         Service (keys, journal, redelivery, deliveries,
//	                         reconciliation, missing payments) that the
//	                         console calls in process
//	caddymodule/console      http.handlers.idempotency_console: the
//	                         operator's pages and their embedded templates
//	caddymodule/command      `idemgate idempotency …`: the CLI, a client of
//	                         the admin API over HTTP (and `send`, `keygen`)
//	caddymodule/metrics      the Prometheus metrics on Caddy's /metrics
//	caddymodule/redeliver    recovery: a journaled notification sent into
//	                         the handler that took it, re-signed where the
//	                         route can
//	delivery                 `deliver async`: the receipt (the gate's Queue)
//	                         and the engine that delivers the store's queue
//	                         to the backend; attached through its Route and
//	                         Observer; no Caddy
//	journal                  what a key's record keeps of a notification and
//	                         of each attempt; no Caddy
//	orders                   one business outcome, once: what a key's order
//	                         remembers, whether a duplicate gets its answer
//	                         or the platform's ack, order_ttl, an order's
//	                         page; no Caddy
//	reconcile                reconciliation (对账): a platform's bill
//	                         against what ran; no Caddy
//	catchup                  missing notifications (补单): one engine per
//	                         route with catch_up, off the request path,
//	                         asks the platform's read API under a store
//	                         lease and a per-minute cap; no Caddy
//	keying                   what every platform shares: Request,
//	                         Notification, Fields, Money, the Platform
//	                         interface, the Preset, the read API's
//	                         vocabulary; no Caddy; keying/bill is what every
//	                         bill shares
//	platforms                the one list of platforms (built in, and guest
//	                         modules built in from elsewhere)
//	platforms/guest          what a platform module is to the handler, and
//	                         its optional powers (bill, re-signer, signer,
//	                         read API, catch_up credentials, pinning), asked
//	                         by type assertion
//	platforms/<name>         one folder per platform (alipay, wechatpay,
//	                         wechatpayv2, stripe, paypal, standardwebhooks,
//	                         generic), a Caddy guest module with its own
//	                         settings: signature check, default key and
//	                         business events, success rule, ack, retry
//	                         schedule, money, re-signer, bill parser, read
//	                         API client, test signer for send and keygen;
//	                         platforms/<name>/<name>bill (alipay, wechatpay,
//	                         stripe, paypal) writes its bill, for tests and
//	                         examples/bills, linked into no binary
//	store                    the stores (embedded bbolt, memory, Redis):
//	                         claim, complete, release, renew, journal,
//	                         queue, order state and its indexes, leases,
//	                         the refused and missing lists; no Caddy
//	internal/cfparse         the Caddyfile readers the directives share
//	internal/headers         the request path's one-pass header copies
//	internal/signer          signs notifications as each platform does (the
//	                         platforms' test signers build on it)
//	internal/gatewaytest,    test support, linked into no binary: an
//	internal/platformtest,   in-process gateway and a counting backend, the
//	internal/platformapi,    platforms' signers, local stand-ins of the
//	internal/redistest,      platforms' APIs, real redis-server processes
//	internal/faultystore,    (Sentinel, Cluster, faults), a fault-injecting
//	internal/billtest,       store wrapper, a bill's rows and its writer,
//	internal/billsample,     examples/bills, the bill parsers' test
//	internal/billcheck,      runners, backends that verify with the
//	internal/sdkbackend,     platforms' SDKs, the fast loop's `Slow`
//	internal/testenv
//	internal/loadfloor       the floor under a first copy (scripts/load.sh)
//	examples/                runnable Caddyfiles, the stand-in legacy
//	                         backend, the demo, the catch-up example,
//	                         monitoring assets
//	scripts/                 load.sh, ablate.sh, nginxgate.sh, scale.sh, fuzz.sh
//
// The arrows point one way: command talks to admin over HTTP (and reads its
// view types); console → admin → app ← caddymodule; admin, console →
// reconcile; caddymodule → catchup, delivery, orders, journal → store;
// everything uses platforms and keying; store, keying and gate import no
// Caddy.
//
// Where a change goes: a platform's rules, settings or API client is its
// folder under platforms/ (a new platform: a new folder and one line in
// platforms/platforms.go, or a module of its own built in with xcaddy); a
// store's semantics or a Redis script is store; what the gateway does in
// a situation is gate, how the answer is written (and recorded)
// caddymodule; a new admin route is caddymodule/admin's route table and
// Service, shown in the console and wrapped by a CLI subcommand; state an
// operator surface needs from a running route goes through the config's
// app (caddymodule/app).
package idemgate

import (
	"runtime/debug"
	"strings"

	// Each module package registers itself, as caddy-l4's imports.go
	// lists its modules: the handler, the admin API, the console, the CLI.
	_ "github.com/idemgate/idemgate/caddymodule"
	_ "github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command"
	_ "github.com/idemgate/idemgate/caddymodule/console"
)

// ModulePath is this module's import path.
const ModulePath = "github.com/idemgate/idemgate"

// Version is idemgate's version as the Go toolchain recorded it in the
// binary: the module version when idemgate is a dependency (an xcaddy
// build), else the main module's version or its VCS revision, else
// "(devel)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	mod := &bi.Main
	for _, dep := range bi.Deps {
		if dep.Path == ModulePath {
			mod = dep
			break
		}
	}
	if mod.Path != ModulePath {
		return "(devel)"
	}
	v := mod.Version
	if mod.Replace != nil {
		// A replaced module (xcaddy --with …=<checkout>) has no version of
		// its own unless the replacement names one.
		v = mod.Replace.Version
		if v == "" {
			v = "(devel) => " + mod.Replace.Path
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	// Built inside a checkout: the revision the toolchain stamped, if any.
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" && mod == &bi.Main {
		return "(devel) " + strings.TrimSpace(rev) + modified
	}
	return "(devel)"
}
