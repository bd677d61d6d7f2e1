package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
)

// Orders (the contract's "Orders: one business outcome, once"): a preset's
// default key is the business event of an order, and once it ran, the
// order remembers it for order_ttl (cache.Order), far beyond ttl. This
// file decides what a key's order remembers and answers a duplicate whose
// remembered answer its platform would not take.

// Default order_ttl: past Alipay's and WeChat Pay's 12-month refund
// windows for an order's events; for platforms whose events are their own
// (Stripe, PayPal, Standard Webhooks) as long as the platform keeps an
// event and lets it be resent by hand (30 days).
const (
	defaultOrderTTL = 400 * 24 * time.Hour
	eventOrderTTL   = 30 * 24 * time.Hour
)

func (h *Handler) defaultOrderTTL() time.Duration {
	if h.preset().OwnEvents {
		return eventOrderTTL
	}
	return defaultOrderTTL
}

// noticeOf is what key's order remembers when it runs: for a preset's
// route, every key (an order's event, or an event id of its own); for a
// generic route, a key written as an order's business event
// ("<merchant>:<order>:paid", as a merchant's own status-query route joins
// Alipay's orders) — any other generic key has no order state. With it go
// what reconciliation needs: payment or refund, the platform's time, the
// objects its bill names (keying.Notification.Settles, At, Refs).
func (h *Handler) noticeOf(key string, n *keying.Notification) notice {
	var nt notice
	keepMerchantRefs(n) // for the journal (search.go)
	if _, event, isEvent := keying.SplitOrder(key); !h.preset().KeyRequired || isEvent {
		nt.run = &cache.OrderRun{TTL: time.Duration(h.OrderTTL), Amount: n.Money.Amount, Currency: n.Money.Currency,
			Settles: n.Settles, At: n.At, Refs: n.Refs, MerchantRefs: n.MerchantRefs}
		if isEvent {
			// The order remembers the key's event, whatever the
			// notification said: a merchant's status-query route keyed
			// "…:<order>:paid" settles a payment too.
			nt.run.Settles = keying.EventSettles(event)
		}
	}
	return nt
}

// platformAck is what this route's platform takes as "received, stop
// retrying", for a duplicate whose own answer is not at hand: Alipay
// `success`, WeChat Pay v2's SUCCESS XML, 200 for the rest.
func (h *Handler) platformAck() AckAnswer {
	if h.async() {
		return h.dlv.ack
	}
	if a := h.preset().Ack; a.Status != 0 {
		return AckAnswer(a)
	}
	return AckAnswer{Status: http.StatusOK}
}

// writeAck writes a, marked Idempotent-Replayed when replayed.
func writeAck(w http.ResponseWriter, r *http.Request, a AckAnswer, replayed bool) error {
	if a.ContentType != "" {
		w.Header().Set("Content-Type", a.ContentType)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	if r.Method == http.MethodHead || a.Body == "" {
		return nil
	}
	_, err := io.WriteString(w, a.Body)
	return err
}

// acceptsAnswer tells whether this route's platform would take rec's
// remembered answer: an answer from another route of the scope (the
// browser return's HTML page, replayed to Alipay's notify) or one no
// longer kept (FromOrder: its order remembers the event ran) is not
// replayed, the platform's ack is.
func (h *Handler) acceptsAnswer(method string, rec *cache.Record) bool {
	if rec.FromOrder {
		return false
	}
	body := rec.Body
	if !rec.BodyCached {
		body = nil
	}
	return h.success.judge(method, rec.Status, rec.Header, body)
}

// checkOrderTTL refuses an order_ttl shorter than ttl: the order would
// forget an event while its answer is still replayed.
func (h *Handler) checkOrderTTL() error {
	if h.OrderTTL < h.TTL {
		return fmt.Errorf("order_ttl (%v) is shorter than ttl (%v): an order must remember its events at least as long as their answers",
			time.Duration(h.OrderTTL), time.Duration(h.TTL))
	}
	return nil
}
