// Package catchup finds payments whose notification never reached the
// backend (补单, "Missing notifications" in the docs) and recovers them
// through the platform or the merchant's own query route — never by
// forging or re-signing a notification, never by concluding "unpaid"
// from silence, an error, NOT_EXIST or an unverified answer, and never by
// closing, cancelling or refunding anything.
//
// An Engine serves one route with a `catch_up` block. It asks the
// platform's read API (keying.EventLister for Stripe and PayPal,
// keying.OrderQuerier for Alipay and WeChat Pay, built by the preset's
// keying.ReadAPI) and reads the route's store: the claim contract, the
// listings (store.Lister), the order state (store.OrderBook), a lease
// (store.Leaser: one instance of a fleet asks at a time) and the missing
// list (store.MissingLog: what was found, what was done, the outcome,
// which every instance sees).
//
// It imports store and keying only, and runs off the request path. The
// app attaches it at three points:
//
//   - one Engine per route with catch_up, started at provision with
//     Run(ctx) in its own goroutine and stopped by cancelling ctx at
//     cleanup; Tick runs one pass (Run calls it every Config.Every);
//   - Engine.Query, the operator's "a customer says they paid" (the CLI's
//     `idemgate idempotency query`, the console's button): one order
//     asked at once, bounded by the engine's per-minute cap;
//   - Config.Observer, where the app wires the idemgate_missing_total
//     metric and the `missing` alert; the admin endpoint
//     GET /idempotency/missing reads the store's missing list.
package catchup
