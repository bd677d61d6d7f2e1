// Package caddymodule is idemgate's Caddy side, around the request path
// of package gate: the `idempotency` HTTP handler
// (http.handlers.idempotency) of the idempotency gateway for payment
// notifications, and its Caddyfile directive. For every notification it
// verifies the platform's signature, renders the key,
// claims it in a store, forwards only the first copy, remembers the
// backend's answer and replays it to every duplicate — or, with `deliver
// async`, acknowledges once the notification is queued and delivers it
// itself.
//
// # The map of the project
//
// Which package owns what, and where a change of each kind goes:
//
//	idemgate (module root)   blank-imports every module package below, so
//	                         `xcaddy build --with github.com/idemgate/idemgate`
//	                         brings all of it; Version
//	cmd/idemgate             main: Caddy's standard modules + the module root
//	caddymodule              this package: the handler around the gate
//	                         (below)
//	gate                     the request path: parse, verify, claim, then
//	                         forward, replay, wait or refuse, then settle;
//	                         no Caddy
//	caddymodule/admin        admin.api.idempotency: keys, journal,
//	                         redelivery, deliveries, reconciliation's
//	                         HTTP side, on Caddy's admin endpoint
//	reconcile                reconciliation (对账): a platform's bill
//	                         against what ran, given a store, the routes
//	                         and a place for pending lists (Env); no Caddy
//	delivery                 `deliver async`: the receipt (the gate's
//	                         Queue: claim held, enqueued, acked) and the
//	                         engine that delivers the store's queue to the
//	                         backend, retries, gives up; attached through
//	                         its Route interface; no Caddy
//	journal                  what a key's record keeps of a notification
//	                         and of each attempt: the request as received
//	                         without credentials, cut at journal_body, the
//	                         attempt's outcome in words; no Caddy
//	caddymodule/redeliver    recovery: a journaled notification sent into
//	                         the handler that took it (the chain kept from
//	                         live requests, or found by an in-process
//	                         probe), re-signed where the route can
//	orders                   one business outcome, once: what a key's
//	                         order remembers (the gate's Route.OrderRun),
//	                         whether a duplicate gets its remembered answer
//	                         or the platform's ack, order_ttl, an order's
//	                         page; no Caddy
//	caddymodule/console      http.handlers.idempotency_console: the
//	                         operator's pages and their embedded templates
//	caddymodule/command      `idemgate idempotency …`: the CLI, a client of
//	                         the admin API over HTTP (and `send`, `keygen`)
//	keying                   what every platform shares: Request,
//	                         Notification, Fields, Money, Settlement, the
//	                         Platform interface and the Preset each platform
//	                         declares, strict form/XML/JSON readers, RSA
//	                         helpers; no Caddy; keying/bill is what every
//	                         bill shares (Reader, Row, Format)
//	platforms                the one list of platforms (Lookup, Names, New):
//	                         nothing else names a platform
//	platforms/<name>         one folder per platform (alipay, wechatpay,
//	                         wechatpayv2, stripe, paypal, standardwebhooks,
//	                         generic): its signature check, default key and
//	                         business events, success rule, ack, retry
//	                         schedule, money, re-signer, bill parser, test
//	                         signer for send and keygen; no Caddy
//	cache                    the stores (embedded bbolt, memory, Redis):
//	                         claim, complete, release, renew, journal,
//	                         queue, order state and its reconciliation
//	                         indexes; no Caddy
//	internal/registry        the idempotency app: what the operator
//	                         surfaces share with the handler while a
//	                         config runs (its stores, routes, delivery
//	                         engines, the chart's counts, the clock),
//	                         reached through ctx.App
//	internal/cfparse         the Caddyfile readers the directives share
//	internal/signer          signs notifications as each platform does,
//	                         apart from the verifiers: the platforms' test
//	                         signers (their Sender, the CLI's send and
//	                         keygen) build on it
//	internal/gatewaytest,    test support, linked into no binary: an
//	internal/platformtest,   in-process gateway, the platforms' signers
//	internal/presettest,     for tests and the table runners their tests
//	internal/redistest,      share, real redis-server processes, a
//	internal/faultystore,    fault-injecting store wrapper, the
//	internal/billtest,       platforms' bills in their layouts and the
//	internal/billcheck       runners their parsers' tests share
//	examples/                runnable Caddyfiles, the stand-in legacy
//	                         backend, the demo, monitoring assets
//
// The arrows point one way: command talks to admin over HTTP (and reads its
// view types); console → admin → registry ← caddymodule; admin, console →
// reconcile (command reads its Report); everything above
// uses platforms, keying and cache, which import neither Caddy nor each
// other's users (a platform package imports keying only).
//
// Where a change goes: a change to a platform's rules is its folder under
// platforms/; a new platform is a new folder and one line in
// platforms/platforms.go (and a row of the presets table test here); a store's semantics or a Redis
// script is cache; what the gateway does in a situation is gate, how the
// answer is written (and recorded) this package;
// a new admin route is caddymodule/admin, shown in the console
// (caddymodule/console) and wrapped by a CLI subcommand
// (caddymodule/command); state an operator surface needs from a running
// route goes through the config's app (internal/registry).
//
// # This package, by file
//
// The request path itself (parse, verify, claim, then forward, replay,
// wait or refuse, then settle) is package gate, free of Caddy; this
// package is its adapter.
//
// handler.go holds the configuration and its lifecycle, options.go
// what is injected instead of production's clock, backend ceiling and
// watch intervals; app.go how a handler joins its config's idempotency app
// (internal/registry), which starts the config's handlers (opens their
// stores, starts their engines) only when the config runs, never when it
// is validated; caddyfile.go the directive; templates.go,
// placeholders.go and templatecheck.go the body, key and fingerprint
// templates and their checks at load; scope.go the key namespace; secrets.go
// the secrets read at start; store.go the store configuration and pool,
// redislog.go go-redis's logger through Caddy's; verify.go the signature
// clock, signkeys.go the verification keys (which one verified, expiry);
// serve.go ServeHTTP, which runs the gate and acts on its outcome, and
// what the gate asks of the route; refusal.go what a refused sender is
// told; forward.go the trip to the next handler, which the gate settles;
// redeliver.go the route's registry entry and its redelivery through
// package redeliver, whose Point is ServeHTTP's first step; retries.go
// the platform's retry budget and the idempotency.last_retry scan;
// replay.go the answer recorder and the replay; journal.go the journal
// (package journal) and search's references as a forward hands them to
// the gate, and a failed key's record read back for its events; decision.go the one place that logs, counts,
// traces and emits what each request came to; observer.go the route's
// metrics, logs and events as the record, the gate's settling and the
// delivery engine (delivery.Observer) report to them; tracing.go and alert.go
// those outputs, package metrics (caddymodule/metrics) the Prometheus
// metrics, which the record and the delivery engine reach through its
// Recorder; deliver.go the configuration of `deliver async` and the
// store's durability for it, deliver_adapter.go the route attached to
// its engine as its delivery.Route (package delivery: the receipt, the gate's queue, and the
// engine that delivers the queue to the backend, whose queue stats feed
// the metrics' gauges); orders.go attaches package orders to the gate
// (Route.OrderRun); ack.go writes the platform's ack.
package caddymodule
