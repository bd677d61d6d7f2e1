package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	_ "github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/store"
)

// TestOrderEventRepairedOnRead: on a real redis-server, an answered
// record whose order lacks its event (as a settle a store outage deferred
// left it, before that settle wrote the order too: here the event and the
// day list are deleted with raw Redis commands) is repaired when a surface
// of the admin API reads it: the order page, search by the merchant's
// order number, reconciliation's look-up of the bill's row. The order
// state in Redis then has the event, with its money and its day index
// entry, read back from Redis itself; and past the answer's ttl, a copy of
// each notification is answered from its order, never forwarded: the
// backend ran each once.
func TestOrderEventRepairedOnRead(t *testing.T) {
	testenv.Slow(t, "process test: a real redis-server")
	const (
		app = "2021004123456789"
		ttl = 3 * time.Second
	)
	const form = "application/x-www-form-urlencoded"
	rs := redistest.Start(t)
	rc := rs.Client()
	ctx := context.Background()
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			verify off
			app_id `+app+`
			store redis {redis}
			ttl `+ttl.String()+`
		}
		reverse_proxy {backend}
	}`, "{redis}", rs.Addr(), "{backend}", be.Addr())

	type payment struct {
		surface, trade, merchantOrder, amount string
		orderKey                              string // its order state in Redis
	}
	pays := []*payment{
		{surface: "order page", trade: "2026100322001458860000000047", merchantOrder: "M47", amount: "47.00"},
		{surface: "search", trade: "2026100322001458860000000048", merchantOrder: "M48", amount: "48.00"},
		{surface: "reconciliation", trade: "2026100322001458860000000049", merchantOrder: "M49", amount: "49.00"},
	}
	notify := func(p *payment) string {
		return url.Values{"app_id": {app}, "trade_no": {p.trade}, "out_trade_no": {p.merchantOrder},
			"trade_status": {"TRADE_SUCCESS"}, "total_amount": {p.amount}, "notify_id": {"n" + p.merchantOrder}}.Encode()
	}
	orderOf := func(p *payment) string { return "alipay:" + app + ":" + p.trade }
	at := time.Now()
	seen := map[string]bool{}
	var dayKey string
	for _, p := range pays {
		if r := gatewaytest.Post(t, g.Base+"/notify", form, notify(p), nil); r.Status != 200 || r.Body != "success" {
			t.Fatalf("%s: first copy: %d %q, want the backend's success", p.merchantOrder, r.Status, r.Body)
		}
		keys, err := rc.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if ok, _ := rc.HExists(ctx, k, "paid").Result(); ok && !seen[k] {
				seen[k], p.orderKey = true, k
			}
			if strings.Contains(k, ":rx:{") {
				dayKey = k
			}
		}
		if p.orderKey == "" || dayKey == "" {
			t.Fatalf("%s: the settle wrote no order state with paid (%q) or day list (%q) among %q", p.merchantOrder, p.orderKey, dayKey, keys)
		}
		// The old deferred settle's leftover: the record answered, the
		// order without its paid event.
		if err := rc.HDel(ctx, p.orderKey, "paid").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Nor did it file the orders in the day index.
	if err := rc.Del(ctx, dayKey).Err(); err != nil {
		t.Fatal(err)
	}

	// Each surface reads its payment.
	status, body := g.AdminDo(t, http.MethodGet, "/idempotency/orders/"+orderOf(pays[0]))
	var page struct {
		Events []struct{ Event, Key, State, Amount string }
	}
	if status != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Events) != 1 ||
		page.Events[0].Key != orderOf(pays[0])+":paid" || page.Events[0].State != "answered" || page.Events[0].Amount != "47.00" {
		t.Errorf("order page: %d %s, want its answered paid event of 47.00", status, body)
	}
	status, body = g.AdminDo(t, http.MethodGet, "/idempotency/search?q=M48")
	if status != 200 || !strings.Contains(body, orderOf(pays[1])+":paid") {
		t.Errorf("search M48: %d %s, want its paid event", status, body)
	}
	bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", at.Add(-12*time.Hour), at.Add(12*time.Hour))
	}, []billtest.Row{{Kind: billtest.Payment, Order: pays[2].trade, MerchantOrder: "M49", Amount: "49.00", Currency: "CNY", Time: at}})
	resp, err := gatewaytest.Client.Post("http://"+g.Admin+"/idempotency/reconcile?platform=alipay&items=1", "text/csv", bytes.NewReader(bill))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep struct {
		SettledNeverRun struct{ Count int } `json:"settled_never_run"`
		Matched         struct{ Count int }
	}
	if resp.StatusCode != 200 || json.Unmarshal(rb, &rep) != nil || rep.SettledNeverRun.Count != 0 || rep.Matched.Count != 1 {
		t.Errorf("reconcile: %d %s, want the payment matched", resp.StatusCode, rb)
	}

	// Read back from Redis, not from the surfaces: the raw hash, the day
	// list, and the order as the store decodes the hash.
	entries := rc.LRange(ctx, dayKey, 0, -1).Val()
	for _, p := range pays {
		if ok, err := rc.HExists(ctx, p.orderKey, "paid").Result(); err != nil || !ok {
			t.Errorf("%s: the order state has no paid event after the %s read it: %v", p.merchantOrder, p.surface, err)
			continue
		}
		if pttl := rc.PTTL(ctx, p.orderKey).Val(); pttl < 24*time.Hour {
			t.Errorf("%s: the repaired order state is kept %v, want order_ttl's 400 days", p.merchantOrder, pttl)
		}
		o := orderInRedis(t, rc, p.orderKey, orderOf(p))
		if len(o.Events) != 1 || o.Events[0].Key != orderOf(p)+":paid" || o.Events[0].Amount != p.amount || o.Events[0].Currency != "CNY" || o.Events[0].Ran.IsZero() {
			t.Errorf("%s: the order in Redis: %+v, want paid of %s CNY", p.merchantOrder, o, p.amount)
		}
	}
	if len(entries) != len(pays) || len(slices.Compact(slices.Sorted(slices.Values(entries)))) != len(pays) {
		t.Errorf("the day list holds %d entries after the repairs, want the %d orders'", len(entries), len(pays))
	}
	// Reading again repairs nothing more.
	if status, _ := g.AdminDo(t, http.MethodGet, "/idempotency/orders/"+orderOf(pays[0])); status != 200 {
		t.Errorf("order page again: %d", status)
	}
	if n := rc.LLen(ctx, dayKey).Val(); n != int64(len(pays)) {
		t.Errorf("the day list holds %d entries after a second read, want %d", n, len(pays))
	}

	// Past the answers' ttl only the orders remember the payments.
	for _, p := range pays {
		gatewaytest.Eventually(t, ttl+10*time.Second, "the answer's record to expire", func() bool {
			status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI(orderOf(p)+":paid"))
			return status == http.StatusNotFound
		})
		if r := gatewaytest.Post(t, g.Base+"/notify", form, notify(p), nil); r.Status != 200 || r.Body != "success" {
			t.Errorf("%s: a copy past ttl: %d %q, want Alipay's success from the order", p.merchantOrder, r.Status, r.Body)
		}
		if n := be.Count(p.merchantOrder); n != 1 {
			t.Errorf("%s (repaired by the %s): the backend ran %d times, want once", p.merchantOrder, p.surface, n)
		}
	}
}

// orderInRedis is the order state hash orderKey of order, decoded as the
// Redis store reads it.
func orderInRedis(t *testing.T, rc *redis.Client, orderKey, order string) *store.Order {
	t.Helper()
	prefix, _, _ := strings.Cut(orderKey, ":{")
	s := store.NewRedis(rc, store.RedisOptions{Prefix: prefix})
	defer s.Close()
	o, err := s.Order(context.Background(), order)
	if err != nil {
		t.Fatalf("the order %s in Redis: %v", order, err)
	}
	return o
}
