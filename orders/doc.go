// Package orders is "one business outcome, once": a payment is an order,
// and each of its business events (paid, refund:<id>, closed) runs the
// backend once, whatever channel or status message brings it and however
// late. A preset's default key names the event ("alipay:<app>:<trade>:paid",
// keying.SplitOrder); once the backend's answer to it says the business
// ran, the store remembers the event in its order (store.OrderRun,
// store.Order) for order_ttl, long after the key's own answer expired with
// ttl, and a later copy is answered, never forwarded.
//
// The package decides; the store keeps the state, and the gate carries it.
// It imports store and keying only, and attaches to the gate at two
// named points:
//
//   - gate.Route.OrderRun: the route answers it with RunOf, what a key's
//     order remembers once it ran (nil: the key is no order's event). The
//     gate puts it on the won claim (gate.Claim.Run), and the completion
//     hands it to the store with the answer (store.Answer.Order), in the
//     same store operation.
//   - The replay decision: a duplicate the gate replays (gate.Replay)
//     gets its remembered answer only where AcceptsAnswer says the
//     route's platform takes it; otherwise the route answers its
//     platform's ack. An answer from another channel of the order (the
//     browser return's page, replayed to Alipay's notify) or one no longer
//     kept (the order remembers the event ran) is not for the platform.
//
// At load, DefaultTTL and CheckTTL settle a route's order_ttl, and
// CheckRecipe refuses a generic route whose key would burn an order's
// event on any 2xx, or whose callers would get an empty 200 once the
// event ran elsewhere (no on_duplicate). Page gathers an order's page for the admin API, the
// CLI and the console: every event of one order in one timeline.
package orders
