package catchup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// The platform's side here is a small in-test EventLister or OrderQuerier:
// the platforms' own clients are tested in their packages against local
// servers that sign as the platforms do; what is under test is the
// engine over real stores (memory, embedded, a real redis-server).

// clock is the engines' injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().Truncate(time.Millisecond)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// storeKind makes a fresh store of one kind.
type storeKind struct {
	name string
	new  func(t *testing.T) store.Store
}

var prefixSeq atomic.Int64

// stores are the real stores the engine runs on; one redis-server for all
// Redis cases of a test.
func stores(t *testing.T) []storeKind {
	srv := redistest.Start(t)
	return []storeKind{
		{"memory", func(t *testing.T) store.Store {
			s := store.NewMemory()
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"embedded", func(t *testing.T) store.Store {
			s, err := store.NewEmbedded(filepath.Join(t.TempDir(), "idem.db"), store.EmbeddedOptions{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) store.Store {
			s := store.NewRedis(srv.Client(), store.RedisOptions{Prefix: fmt.Sprintf("c%d", prefixSeq.Add(1))})
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
}

// eachStore runs f on a fresh store of every kind.
func eachStore(t *testing.T, f func(t *testing.T, s store.Store)) {
	for _, k := range stores(t) {
		t.Run(k.name, func(t *testing.T) { f(t, k.new(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ran settles key as the gate does when the backend ran it: claimed,
// completed with its order run, and the merchant's refs journaled.
func ran(t *testing.T, s store.Store, key string, refs ...string) {
	t.Helper()
	ctx := ctxT(t)
	c, err := s.Claim(ctx, key, "", time.Minute)
	if err != nil || c.Outcome != store.Won {
		t.Fatalf("claim %s: %+v, %v", key, c, err)
	}
	run := &store.OrderRun{TTL: 400 * 24 * time.Hour, MerchantRefs: refs}
	if _, ev := store.OrderOf(key); ev == keying.EventPaid {
		run.Settles, run.Amount, run.Currency = keying.SettlesPayment, "9.90", "CNY"
	}
	j := store.Journal{Notification: &store.Notification{Method: "POST", URI: "/notify", MerchantRefs: refs}}
	if err := s.Complete(ctx, key, c.Token, store.Answer{Status: 200, Body: []byte("success"), BodyCached: true, Order: run}, time.Hour, j); err != nil {
		t.Fatalf("complete %s: %v", key, err)
	}
}

// failed leaves key failed, as a backend's failure does.
func failed(t *testing.T, s store.Store, key string) {
	t.Helper()
	ctx := ctxT(t)
	c, err := s.Claim(ctx, key, "", time.Minute)
	if err != nil || c.Outcome != store.Won {
		t.Fatalf("claim %s: %+v, %v", key, c, err)
	}
	if err := s.Release(ctx, key, c.Token, time.Hour, store.Journal{}); err != nil {
		t.Fatal(err)
	}
}

// lister is an in-test EventLister: its events, and the calls it got.
type lister struct {
	mu      sync.Mutex
	events  []keying.PlatformEvent
	listErr error
	sendErr error
	lists   int
	resent  map[string][]time.Time
	now     func() time.Time
}

func (l *lister) Events(ctx context.Context, since, until time.Time, limit int) ([]keying.PlatformEvent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lists++
	if l.listErr != nil {
		return nil, l.listErr
	}
	var out []keying.PlatformEvent
	for _, e := range l.events {
		if !e.At.Before(since) && e.At.Before(until) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (l *lister) Resend(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resent == nil {
		l.resent = map[string][]time.Time{}
	}
	l.resent[id] = append(l.resent[id], l.now())
	return l.sendErr
}

func (l *lister) resends(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.resent[id])
}

func (l *lister) calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.lists
	for _, r := range l.resent {
		n += len(r)
	}
	return n
}

// querier is an in-test OrderQuerier: per trade number, its answer or
// error; and the trade numbers it was asked about.
type querier struct {
	mu      sync.Mutex
	answers map[string]keying.TradeAnswer
	errs    map[string]error
	asked   []keying.OrderQuery
}

func (q *querier) Query(ctx context.Context, oq keying.OrderQuery) (keying.TradeAnswer, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked = append(q.asked, oq)
	id := oq.TradeNo
	if id == "" {
		id = oq.OutTradeNo
	}
	if err := q.errs[id]; err != nil {
		return keying.TradeAnswer{}, err
	}
	a, ok := q.answers[id]
	if !ok {
		return keying.TradeAnswer{State: keying.TradeNotExist, Status: "ACQ.TRADE_NOT_EXIST"}, nil
	}
	return a, nil
}

// OrderNumbers names an answer as Alipay does (keying.OrderNamer): the
// engine POSTs what its platform's API names.
func (q *querier) OrderNumbers(a keying.TradeAnswer) map[string]string {
	return map[string]string{"app_id": a.Merchant, "trade_no": a.TradeNo, "out_trade_no": a.OutTradeNo, "total_amount": a.Money.Amount}
}

func (q *querier) SubMerchant(string) string { return "" }

func (q *querier) tradeNos() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, a := range q.asked {
		out = append(out, a.TradeNo)
	}
	slices.Sort(out)
	return out
}

func paid(merchant, tradeNo, outTradeNo string) keying.TradeAnswer {
	return keying.TradeAnswer{State: keying.TradePaid, Status: "TRADE_SUCCESS", TradeNo: tradeNo,
		OutTradeNo: outTradeNo, Merchant: merchant, Money: keying.Money{Amount: "9.90", Currency: "CNY"}}
}

// queryRoute is the merchant's status-query route as a real local HTTP
// server: it counts its calls and, like the gate in front of a backend
// that ran the payment by its own query logic, settles the order's paid
// key in the store (the documented recipe's key joins the order).
type queryRoute struct {
	srv   *httptest.Server
	calls atomic.Int64
	mu    sync.Mutex
	forms []map[string]string
}

func newQueryRoute(t *testing.T, s store.Store, scope, merchant string) *queryRoute {
	q := &queryRoute{}
	q.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q.calls.Add(1)
		var body map[string]string
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Method != http.MethodPost ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad", 400)
			return
		}
		q.mu.Lock()
		q.forms = append(q.forms, body)
		q.mu.Unlock()
		trade := body["trade_no"]
		if trade == "" {
			trade = body["transaction_id"]
		}
		key := store.OrderName(scope, merchant, trade) + ":paid"
		c, err := s.Claim(r.Context(), key, "", time.Minute)
		if err == nil && c.Outcome == store.Won {
			err = s.Complete(r.Context(), key, c.Token, store.Answer{Status: 200, Body: []byte("ok"), BodyCached: true,
				Order: &store.OrderRun{TTL: time.Hour, Settles: keying.SettlesPayment}}, time.Hour, store.Journal{})
		}
		if err != nil {
			http.Error(w, "store", 500)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(q.srv.Close)
	return q
}

// observer records what the engine tells.
type observer struct {
	mu      sync.Mutex
	counted map[string]int
	alerts  []store.Missing
	apiErrs []error
}

func (o *observer) Counted(platform, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counted == nil {
		o.counted = map[string]int{}
	}
	o.counted[platform+"/"+outcome]++
}

func (o *observer) Alert(m store.Missing) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.alerts = append(o.alerts, m)
}

func (o *observer) APIError(platform string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.apiErrs = append(o.apiErrs, err)
}

func mustEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func tick(t *testing.T, e *Engine) {
	t.Helper()
	ran, err := e.Tick(ctxT(t))
	if err != nil || !ran {
		t.Fatalf("tick: ran %v, %v", ran, err)
	}
}

func item(t *testing.T, s store.Store, scope, id string) *store.Missing {
	t.Helper()
	m, err := s.(store.MissingLog).MissingItem(ctxT(t), scope, id)
	if err != nil {
		t.Fatalf("missing item %s/%s: %v", scope, id, err)
	}
	return m
}
