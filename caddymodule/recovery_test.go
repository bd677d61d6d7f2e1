package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/platforms"
)

// alertSink collects the alerts posted to it (gatewaytest.AlertSink).
type alertSink struct {
	*gatewaytest.AlertSink
	url string
}

func newAlertSink(t *testing.T) *alertSink {
	s := gatewaytest.NewAlertSink(t)
	return &alertSink{AlertSink: s, url: s.URL}
}

func (s *alertSink) count(event, key string) int { return s.Count(event, key) }

// TestRetryBudgetAlipay: a failed Alipay notification carries the
// platform's retry budget — after one copy, 7 retries left, the next 4
// minutes after it, the last at the schedule's end; after two copies, 6
// left, the next 10 minutes after the second. When the last expected retry
// has come and gone (the clock moved past it), idempotency.last_retry is
// alerted once, while the key still reads failed, not dead.
func TestRetryBudgetAlipay(t *testing.T) {
	a := newAlipayOrders(t)
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) { return 200, "fail", 0 })
	sink := newAlertSink(t)
	g := startGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			store memory
			alert `+sink.url+`
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr())
	rewatch(t, onlyHandler(t), withRetryScanEvery(20*time.Millisecond))
	const key = "alipay:" + testAlipayAppID + ":t-budget:paid"
	d := a.notify("t-budget", "TRADE_SUCCESS")
	sched := platforms.Lookup("alipay").Schedule

	post(t, g.base+"/notify", d.ctype, d.body, nil)
	var rec admin.RecordView
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	pr := rec.PlatformRetries
	if rec.State != "failed" || pr == nil || pr.Left != 7 || pr.Next == nil ||
		!pr.Next.Equal(rec.LastSeen.Add(4*time.Minute)) || !pr.Last.Equal(rec.FirstSeen.Add(sched.Total())) {
		t.Fatalf("after one copy: state %s, platform_retries %+v (first %s), want 7 left, next +4m, last +%s", rec.State, pr, rec.FirstSeen, sched.Total())
	}
	time.Sleep(5 * time.Millisecond)
	post(t, g.base+"/notify", d.ctype, d.body, nil)
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	pr = rec.PlatformRetries
	if rec.Copies != 2 || pr == nil || pr.Left != 6 || pr.Next == nil || !pr.Next.Equal(rec.LastSeen.Add(10*time.Minute)) ||
		!pr.Last.Equal(rec.LastSeen.Add(sched.Total()-4*time.Minute)) {
		t.Fatalf("after two copies: %+v (last seen %s), want 6 left, next +10m", pr, rec.LastSeen)
	}
	if n := sink.count("idempotency.last_retry", key); n != 0 {
		t.Fatalf("last_retry sent %d times with 6 retries left", n)
	}

	// Past the last expected retry, short of the window.
	t.Cleanup(runningApp(t).SetClock(func() time.Time { return time.Now().Add(sched.Total() + 2*time.Minute) }))
	eventually(t, 5*time.Second, "idempotency.last_retry alerted", func() bool { return sink.count("idempotency.last_retry", key) > 0 })
	time.Sleep(200 * time.Millisecond) // ten scans
	if n := sink.count("idempotency.last_retry", key); n != 1 {
		t.Errorf("last_retry alerted %d times, want once", n)
	}
	g.adminJSON(t, http.MethodGet, keyURI(key), &rec)
	if rec.State != "failed" || rec.PlatformRetries == nil || rec.PlatformRetries.Left != 0 {
		t.Errorf("past the last retry: state %s, %+v; want failed (not yet dead), none left", rec.State, rec.PlatformRetries)
	}
	if n := be.count("o-t-budget"); n != 2 {
		t.Errorf("backend ran %d times, want 2", n)
	}
}
