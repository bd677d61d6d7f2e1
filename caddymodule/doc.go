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
// The map of the whole project is the module root's package doc
// (go doc github.com/idemgate/idemgate).
//
// # This package, by file
//
// The request path itself (parse, verify, claim, then forward, replay,
// wait or refuse, then settle) is package gate, free of Caddy; this
// package is its adapter.
//
// handler.go holds the configuration and its provisioning, run.go its
// start and cleanup (what runs beside the requests), options.go
// what is injected instead of production's clock, backend ceiling and
// watch intervals; app.go how a handler joins its config's idempotency app
// (caddymodule/app), which starts the config's handlers (opens their
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
// traces and emits what each request came to (decisionlog.go writes its
// log line after the answer); observer.go the route's
// metrics, logs and events as the record, the gate's settling and the
// delivery engine (delivery.Observer) report to them; tracing.go and alert.go
// those outputs, package metrics (caddymodule/metrics) the Prometheus
// metrics, which the record and the delivery engine reach through its
// Recorder; deliver.go the configuration of `deliver async` (the
// store's durability for it is delivery.Durability's), deliver_adapter.go the route attached to
// its engine as its delivery.Route (package delivery: the receipt, the gate's queue, and the
// engine that delivers the queue to the backend, whose queue stats feed
// the metrics' gauges); orders.go attaches package orders to the gate
// (Route.OrderRun); ack.go writes the platform's ack.
package caddymodule
