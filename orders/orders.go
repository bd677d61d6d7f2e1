package orders

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Default order_ttl: past Alipay's and WeChat Pay's 12-month refund
// windows for an order's events; for platforms whose events are their own
// (Stripe, PayPal, Standard Webhooks) as long as the platform keeps an
// event and lets it be resent by hand (30 days).
const (
	defaultTTL = 400 * 24 * time.Hour
	eventTTL   = 30 * 24 * time.Hour
)

// DefaultTTL is the order_ttl of a route of preset p that writes none:
// the platform's, and never shorter than the route's ttl (CheckTTL).
func DefaultTTL(p *keying.Preset, ttl time.Duration) time.Duration {
	d := defaultTTL
	if p.OwnEvents {
		d = eventTTL
	}
	return max(d, ttl)
}

// CheckTTL refuses an order_ttl shorter than ttl: the order would forget
// an event while its answer is still replayed.
func CheckTTL(orderTTL, ttl time.Duration) error {
	if orderTTL < ttl {
		return fmt.Errorf("order_ttl (%v) is shorter than ttl (%v): an order must remember its events at least as long as their answers",
			orderTTL, ttl)
	}
	return nil
}

// RunOf is what key's order remembers once it ran, kept for orderTTL (nil:
// none). On a route of a preset with a default key (p.KeyRequired unset),
// every key: an order's event, or an event id of its own. On a generic
// route, only a key written as an order's business event
// ("<merchant>:<order>:paid", as a merchant's own status-query route joins
// Alipay's orders); any other generic key has no order state. With it go
// what reconciliation needs: payment or refund, the platform's time, the
// objects its bill names, and the merchant's references search files the
// key under (keying.Notification's Settles, At, Refs, MerchantRefs). A
// page view (keying.Notification.Page) has none.
func RunOf(p *keying.Preset, orderTTL time.Duration, key string, n *keying.Notification) *store.OrderRun {
	_, event, isEvent := keying.SplitOrder(key)
	if p.KeyRequired && !isEvent || n.Page {
		return nil // n.Page: a page view (Alipay's `return display`) is no business event
	}
	run := &store.OrderRun{TTL: orderTTL, Amount: n.Money.Amount, Currency: n.Money.Currency, RefundTotal: n.RefundTotal,
		Settles: n.Settles, At: n.At, Refs: n.Refs, MerchantRefs: n.MerchantRefs, Via: n.Via}
	if isEvent {
		// The order remembers the key's event, whatever the notification
		// said: a merchant's status-query route keyed "…:<order>:paid"
		// settles a payment too.
		run.Settles = keying.EventSettles(event)
	}
	return run
}

// Judge is a route's success rule: whether the answer to a request of
// method means the business ran.
type Judge func(method string, status int, header http.Header, body []byte) bool

// AcceptsAnswer tells whether a route whose success rule is judge takes
// rec's remembered answer as the answer to a duplicate of method. An
// answer from another route of the scope (the browser return's HTML page,
// replayed to Alipay's notify) fails the judge, and one no longer kept
// (FromOrder: only its order remembers the event ran) has none to give:
// either way the route answers its platform's ack instead.
func AcceptsAnswer(judge Judge, method string, rec *store.Record) bool {
	if rec.FromOrder {
		return false
	}
	body := rec.Body
	if !rec.BodyCached {
		body = nil
	}
	return judge(method, rec.Status, rec.Header, body)
}

// CheckRecipe refuses a generic route's key template whose shape (sample:
// the template rendered with every placeholder as "x") names an order's
// business event, unless the route's success rule says the business ran
// (it reads the body or a header). On any 2xx the event would be
// remembered as run, so a merchant's status query answered "200
// WAIT_BUYER_PAY" before the buyer pays would burn the order's paid event,
// and the platform's notification would never reach the backend. Such a
// route also needs on_duplicate (hasOnDuplicate): once the event ran
// through another channel (the platform's notify), the route's own
// callers are answered from the order, and without it they would get an
// empty 200, not what the route's backend says.
func CheckRecipe(key, sample string, saysBusinessRan, hasOnDuplicate bool) error {
	_, event, isEvent := keying.SplitOrder("scope:" + sample)
	if !isEvent || saysBusinessRan && hasOnDuplicate {
		return nil
	}
	if saysBusinessRan {
		return fmt.Errorf("key %q names an order's business event (%s): once the event ran through another channel "+
			"(the platform's notification), this route's callers are answered from the order, and without on_duplicate "+
			"they would get an empty 200; say what they get, e.g. `on_duplicate respond 200 TRADE_SUCCESS`", key, event)
	}
	return fmt.Errorf("key %q names an order's business event (%s): the route would record it as run on any 2xx, "+
		"so an answer such as \"200 WAIT_BUYER_PAY\" before the buyer pays would burn the order's %s event and the platform's "+
		"notification would never reach the backend; write a success rule that says the business ran, "+
		"e.g. `success 200 body PAID` or `success 2xx header X-Order-State paid`", key, event, event)
}
