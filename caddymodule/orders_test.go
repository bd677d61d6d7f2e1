package caddymodule

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The orders tests: one business outcome of a payment runs the backend
// once, across channels (the browser's return, the notify, the merchant's
// own status query), status messages (TRADE_SUCCESS, TRADE_FINISHED) and
// time (copies after the answer's ttl). The backend counts its runs by
// business event (X-Order, which the gateway ignores: keys come from
// signed content). The tests in this process live with the feature
// (orders/gateway_test.go); here are the storm through two processes and
// the helpers this package's tests share.

// alipayOrderSite is Alipay's two channels and the merchant's status
// query (gatewaytest.AlipaySite).
const alipayOrderSite = gatewaytest.AlipaySite

// alipayOrders signs Alipay's deliveries of one order
// (gatewaytest.AlipayOrders).
type alipayOrders struct {
	gatewaytest.AlipayOrders
	signer platformtest.Alipay
	pub    string
}

func newAlipayOrders(t *testing.T) alipayOrders {
	a := gatewaytest.NewAlipayOrders(t)
	return alipayOrders{AlipayOrders: a, signer: a.Signer, pub: a.Pub}
}

// notify is the async notify of trade with status and extra fields.
func (a alipayOrders) notify(trade, status string, extra ...string) delivery {
	return deliveryOf(a.Notify(trade, status, extra...))
}

// ret is the browser's signed return for trade.
func (a alipayOrders) ret(trade string) delivery { return deliveryOf(a.Return(trade)) }

// orderBackend answers as Alipay's legacy merchant does
// (gatewaytest.AlipayOrderBackend).
func orderBackend(t *testing.T) *backend { return &backend{gatewaytest.AlipayOrderBackend(t)} }

// TestAlipayOrderStorm: the browser's return, the notify (TRADE_SUCCESS
// and TRADE_FINISHED) and a refund of one order, dozens of copies each,
// all at once through two gateway processes on one Redis: each business
// event reaches the backend exactly once.
func TestAlipayOrderStorm(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	a := newAlipayOrders(t)
	be := orderBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		delay := 100 * time.Millisecond // copies pile up while the first is at the backend
		if r.URL.Path == "/return" {
			return 200, "<html>ok</html>", delay
		}
		return 200, "success", delay
	})
	site := strings.NewReplacer("{pub}", a.pub, "{store}", "store redis "+rs.Addr(), "{ttl}", "72h", "{backend}", be.addr()).Replace(alipayOrderSite)
	gws := []*gatewayProc{startProc(t, t.TempDir(), site), startProc(t, t.TempDir(), site)}
	for _, g := range gws {
		waitServing(t, g.base)
	}
	const trades = 4
	type copyOf struct {
		label string
		d     delivery
	}
	var copies []copyOf
	for i := range trades {
		trade := "2026031422001437970000000" + itoa(10+i)
		for range 6 {
			copies = append(copies,
				copyOf{trade + ":paid", a.ret(trade)},
				copyOf{trade + ":paid", a.notify(trade, "TRADE_SUCCESS")},
				copyOf{trade + ":paid", a.notify(trade, "TRADE_FINISHED")},
				copyOf{trade + ":refund", a.notify(trade, "TRADE_SUCCESS", "out_biz_no", "RF-"+trade, "refund_fee", "1.00")})
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[int]int{}
	for i, c := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := send(t, gws[i%2].base, c.label, c.d)
			switch {
			case r.status == 200, r.status == http.StatusFound:
			case r.status == http.StatusConflict: // in flight past in_flight wait: the platform retries
			default:
				mu.Lock()
				bad[r.status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("unexpected answers by status: %v", bad)
	}
	for i := range trades {
		trade := "2026031422001437970000000" + itoa(10+i)
		for _, ev := range []string{":paid", ":refund"} {
			if n := be.count(trade + ev); n != 1 {
				t.Errorf("%s%s ran %d times across two gateways, want 1", trade, ev, n)
			}
		}
	}
}
