package keying

import (
	"strings"
	"testing"
)

// knownEvent: is ev a business event SplitOrder reads back?
func knownEvent(ev string) bool {
	_, got, ok := SplitOrder("s:m:o:" + ev)
	return ok && got == ev
}

func TestSplitOrder(t *testing.T) {
	for _, c := range []struct {
		key, order, event string
		ok                bool
	}{
		{"alipay:2021:T1:paid", "alipay:2021:T1", "paid", true},
		{"alipay:2021:T1:closed", "alipay:2021:T1", "closed", true},
		{"alipay:2021:T1:created", "alipay:2021:T1", "created", true},
		{"wechatpay_v2:m:T1:failed", "wechatpay_v2:m:T1", "failed", true},
		{"alipay:2021:T1:finished", "alipay:2021:T1", "finished", true},
		{"alipay:2021:T1:refund:R1", "alipay:2021:T1", "refund:R1", true},
		{"wechatpay:m:T1:refund:R1:abnormal", "wechatpay:m:T1", "refund:R1:abnormal", true},
		{"wechatpay:m:T1:refund:R:1:closed", "wechatpay:m:T1", "refund:R:1:closed", true},
		{"shop:O-1:paid", "shop:O-1", "paid", true},
		// Its own business event: no event suffix.
		{"stripe:evt_1", "", "", false},
		{"demo:order-1", "", "", false},
		{"alipay:2021:T1", "", "", false},
		// The keys of the presets before business events keep their names.
		{"alipay:2021:T1:TRADE_SUCCESS:", "", "", false},
		{"alipay:2021:T1:TRADE_CLOSED:R1", "", "", false},
		{"wechatpay:TRANSACTION.SUCCESS:4200", "", "", false},
		{"wechatpay_v2:refund:5000:SUCCESS", "", "", false},
		// A scope alone is no order; an empty refund id is no refund.
		{"shop:paid", "", "", false},
		{"shop:refund:R1", "", "", false},
		{"shop:O:refund:", "", "", false},
		{":paid", "", "", false},
		{"paid", "", "", false},
		{"", "", "", false},
	} {
		order, event, ok := SplitOrder(c.key)
		if order != c.order || event != c.event || ok != c.ok {
			t.Errorf("SplitOrder(%q) = %q, %q, %v; want %q, %q, %v", c.key, order, event, ok, c.order, c.event, c.ok)
		}
	}
}

func FuzzSplitOrder(f *testing.F) {
	for _, k := range []string{"alipay:2021:T1:paid", "wechatpay:m:T:refund:R:abnormal", "stripe:evt_1", "a:b:refund:", "x::paid"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		order, event, ok := SplitOrder(key)
		if !ok {
			if order != "" || event != "" {
				t.Fatalf("not an order's event, yet %q %q", order, event)
			}
			return
		}
		if order+":"+event != key || !strings.Contains(order, ":") {
			t.Fatalf("SplitOrder(%q) = %q + %q", key, order, event)
		}
		if o2, e2, ok2 := SplitOrder(order + ":" + event); !ok2 || o2 != order || e2 != event {
			t.Fatalf("not stable: %q", key)
		}
	})
}

func TestMoney(t *testing.T) {
	for _, c := range []struct {
		minor, cur, want string
	}{
		{"990", "CNY", "9.90"}, {"1", "cny", "0.01"}, {"0", "USD", "0.00"}, {"123456", "usd", "1234.56"},
		{"500", "JPY", "500"}, {"1234", "KWD", "1.234"}, {"-250", "EUR", "-2.50"},
	} {
		m, err := FromMinor(c.minor, c.cur)
		if err != nil || m.Amount != c.want || m.Currency != strings.ToUpper(c.cur) {
			t.Errorf("FromMinor(%s, %s) = %+v, %v; want %s", c.minor, c.cur, m, err, c.want)
		}
	}
	for _, bad := range []string{"", "9.9.9", "abc", "1e3", "9.9999", "12,00"} {
		if _, err := Major(bad, "CNY"); err == nil {
			t.Errorf("Major(%q) accepted", bad)
		}
		if _, err := FromMinor(bad, "CNY"); err == nil && bad != "" {
			t.Errorf("FromMinor(%q) accepted", bad)
		}
	}
	if m, err := Major("100", "usd"); err != nil || m != (Money{"100", "USD"}) {
		t.Errorf("Major(100) = %+v %v", m, err)
	}
}

// Decimal places the point (the three money formatters share it).
func TestDecimal(t *testing.T) {
	for _, c := range []struct {
		digits string
		scale  int
		neg    bool
		want   string
	}{
		{"5", 2, false, "0.05"}, {"1230", 2, false, "12.30"}, {"7", 0, true, "-7"},
		{"0", 3, false, "0.000"}, {"12", 1, true, "-1.2"}, {"100", 0, false, "100"},
	} {
		if got := Decimal(c.digits, c.scale, c.neg); got != c.want {
			t.Errorf("Decimal(%q, %d, %v) = %q, want %q", c.digits, c.scale, c.neg, got, c.want)
		}
	}
}

// TestRefundIncrease: a refund whose notification names the order's
// refunded total owns its increase over the largest smaller total of the
// order's other refunds, whatever order they are given in.
func TestRefundIncrease(t *testing.T) {
	for _, c := range []struct {
		total       string
		others      []string
		own, before string
	}{
		{"30.00", nil, "30.00", ""},
		{"30.00", []string{"50.00", "60.00"}, "30.00", ""},
		{"50.00", []string{"60.00", "30.00"}, "20.00", "30.00"},
		{"60.00", []string{"30.00", "50.00"}, "10.00", "50.00"},
		{"60.00", []string{"30.00"}, "30.00", "30.00"}, // the 50.00 not known yet
		{"60", []string{"50.5"}, "9.5", "50.5"},
		{"60.00", []string{"60.00", "x", ""}, "60.00", ""},
		{"¥1", []string{"0.50"}, "¥1", ""},
	} {
		own, before := RefundIncrease(c.total, c.others)
		if own != c.own || before != c.before {
			t.Errorf("RefundIncrease(%q, %q) = %q, %q; want %q, %q", c.total, c.others, own, before, c.own, c.before)
		}
	}
}
