package orders

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

const day = 24 * time.Hour

// preset is the registry's preset called name; the tests read the
// platforms' own declarations, not copies of them.
func preset(t *testing.T, name string) *keying.Preset {
	t.Helper()
	p := platforms.Lookup(name)
	if p == nil {
		t.Fatalf("no preset %q", name)
	}
	return p
}

func TestDefaultTTL(t *testing.T) {
	want := map[string]time.Duration{
		"alipay": 400 * day, "wechatpay": 400 * day, "wechatpay_v2": 400 * day, "generic": 400 * day,
		"stripe": 30 * day, "paypal": 30 * day, "standard_webhooks": 30 * day,
	}
	for _, name := range platforms.Names() {
		w, ok := want[name]
		if !ok {
			t.Errorf("preset %q: no default order_ttl expected here; add it to this table", name)
			continue
		}
		if got := DefaultTTL(preset(t, name), 72*time.Hour); got != w {
			t.Errorf("%s: default order_ttl %v, want %v", name, got, w)
		}
	}
	// Never shorter than ttl, which CheckTTL would refuse.
	if got := DefaultTTL(preset(t, "stripe"), 45*day); got != 45*day {
		t.Errorf("stripe with ttl 45d: default order_ttl %v, want ttl's 45d", got)
	}
	if got := DefaultTTL(preset(t, "alipay"), 500*day); got != 500*day {
		t.Errorf("alipay with ttl 500d: default order_ttl %v, want ttl's 500d", got)
	}
	// A platform name the registry does not list (the handler's fallback
	// preset): the order's default.
	if got := DefaultTTL(&keying.Preset{Name: "unknown"}, time.Hour); got != 400*day {
		t.Errorf("unlisted preset: %v, want 400d", got)
	}
}

func TestCheckTTL(t *testing.T) {
	for _, c := range []struct {
		orderTTL, ttl time.Duration
		ok            bool
	}{
		{400 * day, 72 * time.Hour, true},
		{72 * time.Hour, 72 * time.Hour, true},
		{DefaultTTL(&keying.Preset{OwnEvents: true}, 31*day), 31 * day, true},
		{time.Hour, 72 * time.Hour, false},
		{72*time.Hour - time.Nanosecond, 72 * time.Hour, false},
	} {
		err := CheckTTL(c.orderTTL, c.ttl)
		if c.ok != (err == nil) {
			t.Errorf("CheckTTL(%v, %v) = %v, want ok=%v", c.orderTTL, c.ttl, err, c.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "order_ttl ("+c.orderTTL.String()+") is shorter than ttl ("+c.ttl.String()+")") {
			t.Errorf("CheckTTL(%v, %v): %q does not name both", c.orderTTL, c.ttl, err)
		}
	}
}

// note is a verified notification of the given settlement, with everything
// an order run copies.
func note(settles keying.Settlement) *keying.Notification {
	return &keying.Notification{Money: keying.Money{Amount: "88.88", Currency: "CNY"}, Settles: settles,
		At: time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC), Refs: []string{"ch_1"}, MerchantRefs: []string{"o-1"}}
}

func TestRunOf(t *testing.T) {
	const ttl = 400 * day
	full := func(settles keying.Settlement) *store.OrderRun {
		n := note("")
		return &store.OrderRun{TTL: ttl, Amount: "88.88", Currency: "CNY", Settles: settles, At: n.At, Refs: n.Refs, MerchantRefs: n.MerchantRefs}
	}
	for _, c := range []struct {
		name, preset, key string
		n                 *keying.Notification
		want              *store.OrderRun // nil: no order state
	}{
		// A preset's default key: the order's event, settled as the
		// notification says.
		{"alipay paid", "alipay", "alipay:2021:T1:paid", note(keying.SettlesPayment), full(keying.SettlesPayment)},
		{"alipay refund", "alipay", "alipay:2021:T1:refund:RF-1", note(keying.SettlesRefund), full(keying.SettlesRefund)},
		{"alipay closed", "alipay", "alipay:2021:T1:closed", note(""), full("")},
		// The key's event wins over what the notification said.
		{"alipay key names paid", "alipay", "alipay:2021:T1:paid", note(""), full(keying.SettlesPayment)},
		// A route's own key on a preset route: remembered all the same.
		{"alipay own key", "alipay", "alipay:finished-T1", note(keying.SettlesPayment), full(keying.SettlesPayment)},
		// An event id that is its own business event.
		{"stripe event", "stripe", "stripe:evt_1", note(keying.SettlesPayment), full(keying.SettlesPayment)},
		// Generic: a key written as an order's event (the merchant's
		// status-query route) joins the order and settles its event,
		// whatever the notification said.
		{"generic order event", "generic", "alipay:2021:T1:paid", note(""), full(keying.SettlesPayment)},
		{"generic refund event", "generic", "shop:m1:o1:refund:r9", note(keying.SettlesPayment), full(keying.SettlesRefund)},
		{"generic closed event", "generic", "shop:m1:o1:closed", note(keying.SettlesPayment), full("")},
		// Generic: any other key keeps no order state.
		{"generic own key", "generic", "generic:g-1", note(keying.SettlesPayment), nil},
		{"generic bare paid", "generic", "shop:paid", note(""), nil},
		{"generic unknown event", "generic", "shop:m1:o1:shipped", note(""), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := RunOf(preset(t, c.preset), ttl, c.key, c.n)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("RunOf(%s, %q) = %+v, want %+v", c.preset, c.key, got, c.want)
			}
		})
	}
}

func TestAcceptsAnswer(t *testing.T) {
	// Alipay's notify takes 200 + "success"; its return's page is not it.
	judge := func(method string, status int, _ http.Header, body []byte) bool {
		return method == http.MethodPost && status == 200 && string(body) == "success"
	}
	for _, c := range []struct {
		name string
		rec  store.Record
		want bool
	}{
		{"its own answer", store.Record{Status: 200, Body: []byte("success"), BodyCached: true}, true},
		{"another channel's page", store.Record{Status: 200, Body: []byte("<html>thank you</html>"), BodyCached: true}, false},
		{"the body not kept", store.Record{Status: 200, Body: []byte("success")}, false},
		{"only the order remembers", store.Record{Status: 200, Body: []byte("success"), BodyCached: true, FromOrder: true}, false},
	} {
		if got := AcceptsAnswer(judge, http.MethodPost, &c.rec); got != c.want {
			t.Errorf("%s: AcceptsAnswer = %v, want %v", c.name, got, c.want)
		}
	}
	// The judge sees the duplicate's method: the same answer, judged by
	// another channel's rule.
	if AcceptsAnswer(judge, http.MethodGet, &store.Record{Status: 200, Body: []byte("success"), BodyCached: true}) {
		t.Error("a GET duplicate: accepted by a rule that takes only POST")
	}
	// A record with no answer kept still shows the judge its status and
	// headers.
	saw := []byte("unset")
	AcceptsAnswer(func(_ string, status int, h http.Header, body []byte) bool {
		saw = body
		return status == 204 && h.Get("X-State") == "paid"
	}, http.MethodPost, &store.Record{Status: 204, Header: http.Header{"X-State": {"paid"}}, Body: []byte("stale")})
	if saw != nil {
		t.Errorf("a record whose body was not kept showed the judge %q, want nil", saw)
	}
}

func TestCheckRecipe(t *testing.T) {
	for _, c := range []struct {
		name, key, sample string
		saysRan, onDup    bool
		want              string // "" for no error
	}{
		{"status query on any 2xx", "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid", "x:x:paid", false, false,
			"names an order's business event (paid)"},
		{"refund query on any 2xx", "{a}:{b}:refund:{c}", "x:x:refund:x", false, false, "business event (refund:x)"},
		{"closed on any 2xx", "{a}:{b}:closed", "x:x:closed", false, false, "burn the order's closed event"},
		// "scope:" is prepended as the store does: one part and an event
		// is an order of that part.
		{"one part and paid", "{o}:paid", "x:paid", false, false, "business event (paid)"},
		{"status query with a rule that says it ran", "{a}:{b}:paid", "x:x:paid", true, true, ""},
		{"status query without on_duplicate", "{a}:{b}:paid", "x:x:paid", true, false, "without on_duplicate they would get an empty 200"},
		{"no event", "{a}:{b}:paid-ish", "x:x:paid-ish", false, false, ""},
		{"a bare event", "paid", "paid", false, false, ""},
		{"a plain key", "{http.request.header.Idempotency-Key}", "x", false, false, ""},
	} {
		err := CheckRecipe(c.key, c.sample, c.saysRan, c.onDup)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		case err != nil && (!strings.Contains(err.Error(), "key \""+c.key+"\"") ||
			!strings.Contains(err.Error(), "success 200 body PAID") && !strings.Contains(err.Error(), "on_duplicate respond 200")):
			t.Errorf("%s: %q names neither the key nor the fix", c.name, err)
		}
	}
}
