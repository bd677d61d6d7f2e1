package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
)

// Search (cache.Searcher): a key is filed under the merchant's own
// references its notification signed (keying.Notification.MerchantRefs:
// out_trade_no, refund numbers, Stripe and PayPal ids), so support finds
// an order as the customer names it. They reach the store with the
// journal's notification (receivedNotification) and a completion's order
// run (noticeOf). The parse step that holds the verified notification
// and the forward that writes the journal share only the request: the
// references ride on its replacer, under merchantRefsVar.

// merchantRefsVar is the replacer variable that holds a verified
// notification's merchant references ([]string).
const merchantRefsVar = "idempotency.merchant_refs"

// keepMerchantRefs puts n's references on its request's replacer.
func keepMerchantRefs(n *keying.Notification) {
	if len(n.MerchantRefs) == 0 || n.Fields == nil {
		return
	}
	if repl, ok := n.Fields.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set(merchantRefsVar, n.MerchantRefs)
	}
}

// merchantRefsOf are the references keepMerchantRefs put on r's
// replacer, nil when none.
func merchantRefsOf(r *http.Request) []string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return nil
	}
	v, _ := repl.Get(merchantRefsVar)
	refs, _ := v.([]string)
	return refs
}
