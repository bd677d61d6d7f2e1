// Package gatewaytest runs the real idempotency module in a test process
// for the tests of every package that needs a gateway (the handler's, the
// admin API's, the console's, the CLI's, and a feature's tested through the
// whole gateway in its own folder: orders, delivery, catchup, metrics,
// redeliver, app): a Caddyfile site loaded on a free loopback port (with or
// without the admin endpoint), a stand-in legacy backend that counts how
// often each order reached it, the backend behind `deliver async`, signed
// deliveries (Alipay's order), an alert sink, /metrics scraped, an HTTP
// client and the waits around them.
//
// It is test support: only _test.go files import it, so the shipped binary
// never links it (nor the testing package). It must not import the module
// packages themselves — their own in-package tests import it — so a test
// file blank-imports what its config needs (caddymodule for the
// `idempotency` directive, caddymodule/console for `idempotency_console`,
// caddymodule/admin for the admin API).
package gatewaytest
