// Package registry is the idempotency app (module id `idempotency`): the
// state the operator surfaces (the admin API, the console) share with the
// request path while a config runs. Each config's App owns its routes by
// scope, its running delivery engines, the stores its handlers use, the
// console's per-minute counts and the clock that tells failed from dead.
//
// The handler (caddymodule) registers into its config's app at provision
// and cleanup; the admin API and the console get the same app through
// ctx.App, only read it and act through what it hands them. Nothing here
// knows about HTTP handlers, templates or the CLI, so the arrows point one
// way:
//
//	command ─(HTTP)→ admin ← console
//	                   ↓        ↓
//	                  registry ← caddymodule
//
// An app's state is safe for concurrent use. A reload provisions and
// starts the new config's app before the old config's is cleaned up, so a
// reader always finds one, and nothing is left behind once a config is
// gone. Only what must outlive a config lives in a package-level
// caddy.UsagePool, as Caddy's own modules keep shared clients: the opened
// stores (a reload must not reopen a Redis client or a bbolt file) and the
// console's counts (a reload must not wipe the chart).
package app
