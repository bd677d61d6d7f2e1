// Package registry is what the operator surfaces (the admin API, the
// console) share with the request path while a config runs: the pooled
// stores, the provisioned routes of each scope, the running delivery
// engines, the console's per-minute counts and the redelivery mark.
//
// The handler (caddymodule) writes into it at provision and cleanup; the
// admin API and the console only read it and act through what it hands
// them. Nothing here knows about HTTP handlers, templates or the CLI, so
// the arrows point one way:
//
//	command ─(HTTP)→ admin ← console
//	                   ↓        ↓
//	                  registry ← caddymodule
//
// Every registry is process-wide and safe for concurrent use. An entry
// lives as long as the handler that registered it: a reload registers the
// new config's entries before the old config's are removed, so a reader
// always finds one, and nothing is left behind once a route is gone.
package registry
