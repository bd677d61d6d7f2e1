package catchup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// maxListed bounds the records one pass reads per listing (newest
// first): a route with more answered records in its window than this
// has its oldest candidates left unread (an index of created and return
// keys would lift it).
const maxListed = 50000

// candidate is an order the gateway has reason to expect a payment of.
type candidate struct {
	// order is the order's name in the store ("<scope>:<merchant>:<id>"),
	// "" when the operator named it by the merchant's number only; id is
	// the platform's trade number, outTradeNo the merchant's.
	order, id, outTradeNo string
	// key is the record that made it a candidate; since when it came.
	key   string
	since time.Time
	// sub is a service provider's sub-merchant (WeChat Pay's sub_mchid):
	// the query goes to the partner URL.
	sub string
}

// orderPass is a pass on an OrderQuerier platform: the candidates past
// Grace whose order has no paid event are queried on the back-off
// schedule, and a verified paid answer recovered.
func (e *Engine) orderPass(ctx context.Context) error {
	now := e.cfg.Now()
	cands, err := e.candidates(ctx, now)
	if err != nil {
		return err
	}
	for _, c := range cands {
		if _, err := e.order(ctx, now, c, false); err != nil {
			if errors.Is(err, ErrCapped) {
				return nil // the rest waits for the next pass, unchanged
			}
			return err
		}
	}
	return nil
}

// candidates lists, from the store, the orders with a created event, a
// display return (…:return) and a failed or dead payment key (…:paid),
// in the window and past grace, one per order.
func (e *Engine) candidates(ctx context.Context, now time.Time) ([]candidate, error) {
	var out []candidate
	seen := map[string]bool{}
	for _, st := range []store.State{store.StateAnswered, store.StateFailed, store.StateDead} {
		q := store.ListQuery{State: st, Scope: e.cfg.Scope, Since: now.Add(-e.cfg.Window), Limit: 1000, Now: now}
		for n := 0; n < maxListed; {
			p, err := e.list.List(ctx, q)
			if err != nil {
				return nil, err
			}
			for _, r := range p.Records {
				n++
				order, ok := expects(r.Key, st)
				if !ok || seen[order] || now.Before(r.FirstSeen.Add(e.cfg.Grace)) {
					continue
				}
				seen[order] = true
				_, merchant, id := store.OrderParts(order)
				out = append(out, candidate{order: order, id: id, key: r.Key, since: r.FirstSeen, sub: e.sub(merchant)})
			}
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
	}
	// The open items: an order whose record changed state (a failed
	// payment key that ran since) or expired is still followed.
	items, err := e.missing.Missing(ctx, store.MissingQuery{Scope: e.cfg.Scope, Limit: store.MissingCap})
	if err != nil {
		return nil, err
	}
	for _, m := range items {
		if m.Order == "" || m.Outcome == OutcomeRecovered || seen[m.Order] {
			continue
		}
		seen[m.Order] = true
		_, merchant, _ := store.OrderParts(m.Order)
		out = append(out, candidate{order: m.Order, id: m.ID, outTradeNo: m.MerchantRef, since: m.Found, sub: e.sub(merchant)})
	}
	return out, nil
}

// expects says which order a record of state st makes a candidate.
func expects(key string, st store.State) (string, bool) {
	if st == store.StateAnswered {
		if o, ok := strings.CutSuffix(key, ":return"); ok && strings.Count(o, ":") >= 2 {
			return o, true
		}
		o, ev := store.OrderOf(key)
		return o, ev == keying.EventCreated
	}
	o, ev := store.OrderOf(key)
	return o, ev == keying.EventPaid
}

// Query asks the platform about one order now, as the operator does for
// "a customer says they paid": q names it by the merchant's out_trade_no
// or the platform's trade number. It is bounded by the per-minute cap
// (ErrCapped) and recovers a verified paid order as a pass would; the
// item it returns is kept in the missing list.
func (e *Engine) Query(ctx context.Context, q keying.OrderQuery) (store.Missing, error) {
	if e.querier == nil {
		return store.Missing{}, fmt.Errorf("catchup: platform %q is not queried by order", e.cfg.Platform)
	}
	if q.TradeNo == "" && q.OutTradeNo == "" {
		return store.Missing{}, errors.New("catchup: name the order by out_trade_no or trade_no")
	}
	return e.order(ctx, e.cfg.Now(), candidate{id: q.TradeNo, outTradeNo: q.OutTradeNo, since: e.cfg.Now(), sub: q.SubMerchant}, true)
}

// sub is the sub-merchant an order's merchant is, as the platform's read
// API tells (keying.OrderNamer); "" when it is the API's own merchant.
func (e *Engine) sub(merchant string) string {
	if n, ok := e.cfg.API.(keying.OrderNamer); ok {
		return n.SubMerchant(merchant)
	}
	return ""
}

// order queries one candidate (asked: the operator's, at once) and keeps
// what was learnt.
func (e *Engine) order(ctx context.Context, now time.Time, c candidate, asked bool) (store.Missing, error) {
	var m *store.Missing
	var err error
	if c.order != "" {
		if m, err = e.item(ctx, c.id); err != nil {
			return store.Missing{}, err
		}
		key, err := e.ran(ctx, c.order, keying.EventPaid)
		if err != nil {
			return store.Missing{}, err
		}
		if key != "" {
			err := e.recovered(ctx, m, key)
			return e.result(m, err)
		}
		if !asked && (!due(m, now) || (m == nil && now.After(c.since.Add(e.cfg.Window)))) {
			return store.Missing{}, nil
		}
	}
	if c.outTradeNo == "" && c.key != "" {
		// The merchant's number, from the notification's signed refs.
		if r, err := e.store.Lookup(ctx, c.key); err == nil && r.Notification != nil && len(r.Notification.MerchantRefs) > 0 {
			c.outTradeNo = r.Notification.MerchantRefs[0]
		}
	}
	var ans keying.TradeAnswer
	qerr := e.call(ctx, func(ctx context.Context) error {
		var err error
		ans, err = e.querier.Query(ctx, keying.OrderQuery{OutTradeNo: c.outTradeNo, TradeNo: c.id, SubMerchant: c.sub})
		return err
	})
	if errors.Is(qerr, ErrCapped) {
		return store.Missing{}, qerr
	}
	if qerr == nil && c.order == "" && ans.TradeNo != "" {
		// The operator's order, named by the answer.
		c.id = ans.TradeNo
		if ans.Merchant != "" {
			c.order = store.OrderName(e.cfg.Scope, ans.Merchant, ans.TradeNo)
		}
	}
	if c.id == "" {
		c.id = c.outTradeNo
	}
	if asked {
		if m, err = e.item(ctx, c.id); err != nil {
			return store.Missing{}, err
		}
	}
	n := store.Missing{}
	if m != nil {
		n = *m
	}
	n.Scope, n.Platform, n.ID, n.Order = e.cfg.Scope, e.cfg.Platform, c.id, c.order
	if c.outTradeNo != "" {
		n.MerchantRef = c.outTradeNo
	}
	n.Action, n.Key = store.MissingQueried, ""
	n.Attempts++
	n.NextAt = next(n.Attempts, now, c.since.Add(e.cfg.Window))
	switch {
	case qerr != nil:
		n.Outcome, n.Reason = OutcomeUnknown, e.apiReason(qerr)
	case ans.State == keying.TradeNotExist:
		n.Outcome, n.Reason = OutcomeUnknown, "NOT_EXIST: the platform does not know the order (yet)"
	case ans.State == keying.TradeNotPaid:
		n.Outcome, n.Reason = OutcomeNotPaid, "the platform says "+ans.Status
	case ans.State == keying.TradePaid:
		if ans.OutTradeNo != "" {
			n.MerchantRef = ans.OutTradeNo
		}
		n.Amount, n.Currency, n.At, n.Reason = ans.Money.Amount, ans.Money.Currency, ans.At, ""
		if c.order != "" {
			key, err := e.ran(ctx, c.order, keying.EventPaid)
			if err != nil {
				return store.Missing{}, err
			}
			if key != "" {
				n.Outcome, n.Key, n.NextAt = OutcomeRecovered, key, time.Time{}
				break
			}
		}
		e.recover(ctx, &n, c, ans)
	default:
		n.Outcome, n.Reason = OutcomeUnknown, "an answer of no known state"
	}
	err = e.put(ctx, m, n)
	return e.result(&n, err)
}

func (e *Engine) result(m *store.Missing, err error) (store.Missing, error) {
	if m == nil || err != nil {
		return store.Missing{}, err
	}
	return *m, nil
}

// recover acts on a verified paid order whose paid event never ran.
func (e *Engine) recover(ctx context.Context, n *store.Missing, c candidate, ans keying.TradeAnswer) {
	if e.cfg.Recover != RecoverQueryRoute {
		n.Action, n.Outcome, n.NextAt = store.MissingAlerted, OutcomeAlertOnly, time.Time{}
		return
	}
	n.Action = store.MissingQueryRoute
	body, err := json.Marshal(queryRouteBody(e.cfg.API, c, n, ans))
	if err != nil {
		n.Outcome, n.Reason = OutcomeMissing, "the order's numbers do not encode"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.QueryRoute, bytes.NewReader(body))
	if err != nil {
		n.Outcome, n.Reason = OutcomeMissing, "the query route's URL is bad"
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		n.Outcome, n.Reason = OutcomeMissing, "the query route could not be reached"
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		n.Outcome, n.Reason = OutcomeMissing, fmt.Sprintf("the query route answered %d", resp.StatusCode)
		return
	}
	// The backend ran the payment by its own query logic, through the
	// gate: final. The key is the paid event's when the route's key joins
	// the order (the documented recipe).
	n.Outcome, n.NextAt = OutcomeRecovered, time.Time{}
	if c.order != "" {
		n.Key, _ = e.ran(ctx, c.order, keying.EventPaid)
	}
}

// queryRouteBody is what the merchant's status-query route is POSTed: the
// order's numbers as the platform names them (keying.OrderNamer), so the
// documented key ({idempotency.json.app_id}:{idempotency.json.trade_no}:paid,
// WeChat Pay's {idempotency.json.mchid}:{idempotency.json.transaction_id}:paid)
// resolves to the order's paid event and the gate runs it once. An API
// that names nothing gets out_trade_no and trade_no.
func queryRouteBody(api any, c candidate, n *store.Missing, ans keying.TradeAnswer) map[string]string {
	if ans.TradeNo == "" {
		ans.TradeNo = c.id
	}
	if ans.OutTradeNo == "" {
		ans.OutTradeNo = n.MerchantRef
	}
	if namer, ok := api.(keying.OrderNamer); ok {
		return namer.OrderNumbers(ans)
	}
	return map[string]string{"out_trade_no": ans.OutTradeNo, "trade_no": ans.TradeNo}
}
