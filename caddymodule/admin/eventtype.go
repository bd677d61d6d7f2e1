package admin

import (
	"context"
	"slices"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// Where a key is an event's own id (Stripe's evt_…), the key names no
// business event and no order: the views show the platform's type of the
// event instead (keying.Notification.Type), and search follows a payment's
// id (keying.Notification.Payment) from the events the merchant's number
// found to the payment's other events (its charges and refunds, which do
// not carry the PaymentIntent's metadata.order_id). Both are read from the
// journaled notification's signed content, verified as its route does.

// eventTypeOf is the platform's type of rec's event where its key names
// none; "".
func eventTypeOf(ctx context.Context, a *app.App, rec *store.Record) string {
	if _, event := store.OrderOf(rec.Key); event != "" {
		return ""
	}
	if n, ok := verified(ctx, a, rec); ok {
		return n.Type
	}
	return ""
}

// maxPaymentHops bounds the payments one search follows.
const maxPaymentHops = 4

// typesAndPayments names the event of each match whose key names none,
// and adds the events of the payments the matches found by the merchant's
// reference belong to (found by the payment's id, which is their Ref),
// at most limit matches in all.
func typesAndPayments(ctx context.Context, a *app.App, ps *app.Store, q string, m []store.Match, limit int) []store.Match {
	var payments []string
	for i := range m {
		if m[i].FromOrder || m[i].Event != "" {
			continue // an order's event (Alipay, WeChat Pay) has no payment id of its own
		}
		rec, err := ps.Lookup(ctx, m[i].Key)
		if err != nil {
			continue
		}
		n, ok := verified(ctx, a, rec)
		if !ok {
			continue
		}
		m[i].Event = n.Type
		if m[i].Ref != "" && n.Payment != "" && n.Payment != q && !slices.Contains(payments, n.Payment) && len(payments) < maxPaymentHops {
			payments = append(payments, n.Payment)
		}
	}
	seen := map[string]bool{}
	for _, x := range m {
		seen[x.Key] = true
	}
	for _, p := range payments {
		if len(m) >= limit {
			break
		}
		more, err := store.Search(ctx, ps.Store, store.SearchQuery{Q: p, Limit: limit, NoPrefix: true, Window: a.WindowOf, Now: a.Now()})
		if err != nil {
			continue
		}
		for _, x := range more {
			if seen[x.Key] || len(m) >= limit {
				continue
			}
			seen[x.Key] = true
			if x.Event == "" && !x.FromOrder {
				if rec, err := ps.Lookup(ctx, x.Key); err == nil {
					x.Event = eventTypeOf(ctx, a, rec)
				}
			}
			if x.Amount == "" && !x.FromOrder {
				if rec, err := ps.Lookup(ctx, x.Key); err == nil {
					if money, ok := MoneyOf(ctx, a, ps, rec); ok {
						x.Amount, x.Currency = money.Amount, money.Currency
					}
				}
			}
			m = append(m, x)
		}
	}
	return m
}
