package admin

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// journalView decodes what GET /idempotency/keys/<key>?body=1 answers.
type journalView struct {
	Key          string `json:"key"`
	State        string `json:"state"`
	Copies       int64  `json:"copies"`
	AttemptCount int64  `json:"attempt_count"`
	CopyOutcomes struct {
		Forwarded int64 `json:"forwarded"`
		Replayed  int64 `json:"replayed"`
	} `json:"copy_outcomes"`
	Notification *struct {
		Method   string      `json:"method"`
		URI      string      `json:"uri"`
		Header   http.Header `json:"header"`
		BodySize int64       `json:"body_size"`
		Body     string      `json:"body"`
	} `json:"notification"`
	Attempts []struct {
		Status  int    `json:"status"`
		Outcome string `json:"outcome"`
		Body    string `json:"body"`
	} `json:"attempts"`
}

func b64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64 %q: %v", s, err)
	}
	return string(b)
}

// TestJournalFailuresThenSuccess: a backend failing the first three copies
// then succeeding leaves a record with four attempts, their statuses and
// failure bodies, and the notification's raw bytes and headers (without
// credentials); the fifth copy is replayed. On every store.
func TestJournalFailuresThenSuccess(t *testing.T) {
	gatewaytest.EachStore(t, func(t *testing.T, name, store string) {
		be := gatewaytest.NewBackend(t)
		be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			if n <= 3 {
				return 500 + n, "db down " + strconv.Itoa(n), 0
			}
			return 200, "ok " + order, 0
		})
		g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", store, "{backend}", be.Addr(), "{extra}", "")
		order := "j-" + name
		form := url.Values{"out_trade_no": {order}, "total_amount": {"9.90"}}.Encode()
		hdr := http.Header{"Authorization": {"Bearer secret"}, "Cookie": {"s=1"}, "X-Platform": {"demo"}}
		for i := 1; i <= 5; i++ {
			r := gatewaytest.Post(t, g.Base+"/notify?src=test", "application/x-www-form-urlencoded", form, hdr)
			want := 500 + i
			if i >= 4 {
				want = 200
			}
			if r.Status != want || r.Replayed != (i == 5) {
				t.Fatalf("copy %d: %d replayed=%v, want %d", i, r.Status, r.Replayed, want)
			}
		}
		if n := be.Count(order); n != 4 {
			t.Fatalf("backend ran %d times, want 4", n)
		}
		var rec journalView
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:"+order)+"?body=1", &rec)
		if rec.State != "answered" || rec.Copies != 5 || rec.AttemptCount != 4 || len(rec.Attempts) != 4 ||
			rec.CopyOutcomes.Forwarded != 4 || rec.CopyOutcomes.Replayed != 1 {
			t.Fatalf("record: %+v", rec)
		}
		for i, a := range rec.Attempts {
			if i < 3 && (a.Status != 501+i || a.Outcome != "failed" || b64(t, a.Body) != "db down "+strconv.Itoa(i+1)) {
				t.Errorf("attempt %d: %+v", i+1, a)
			}
			if i == 3 && (a.Status != 200 || a.Outcome != "answered" || a.Body != "") {
				t.Errorf("attempt 4: %+v", a)
			}
		}
		n := rec.Notification
		if n == nil || n.Method != "POST" || n.URI != "/notify?src=test" || b64(t, n.Body) != form || n.BodySize != int64(len(form)) {
			t.Fatalf("notification: %+v", n)
		}
		if n.Header.Get("X-Platform") != "demo" || n.Header.Get("Authorization") != "" || n.Header.Get("Cookie") != "" {
			t.Errorf("journaled headers: %v", n.Header)
		}
	})
}

// TestJournalFailedListedAndDead: a key the backend failed is listed as
// failed; once the platform's retry window since it was first seen has
// passed (the clock moved), it is listed as dead, and no longer as failed.
func TestJournalFailedListedAndDead(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 503, "down", 0
	})
	g := gatewaytest.StartGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			verify off
			store memory
		}
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())
	for _, id := range []string{"evt_a", "evt_b"} {
		r := gatewaytest.Post(t, g.Base+"/stripe", "application/json", `{"id":"`+id+`","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`,
			http.Header{"X-Order": {id}})
		if r.Status != 503 {
			t.Fatalf("%s: %d, want the backend's 503", id, r.Status)
		}
		time.Sleep(5 * time.Millisecond) // distinct milliseconds: the listing's order is by time
	}
	var page struct {
		Keys []journalView `json:"keys"`
		Next string        `json:"next"`
	}
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=failed&scope=stripe", &page)
	if len(page.Keys) != 2 || page.Keys[0].Key != "stripe:evt_b" || page.Keys[1].Key != "stripe:evt_a" || page.Next != "" {
		t.Fatalf("failed, newest first: %+v", page)
	}
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=dead", &page)
	if len(page.Keys) != 0 {
		t.Fatalf("dead before the window passed: %+v", page.Keys)
	}

	t.Cleanup(gatewaytest.App(t).SetClock(func() time.Time { return time.Now().Add(72*time.Hour + time.Minute) })) // Stripe retries for 3 days
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=dead&limit=1", &page)
	if len(page.Keys) != 1 || page.Keys[0].Key != "stripe:evt_b" || page.Keys[0].State != "dead" || page.Next == "" {
		t.Fatalf("dead, first page: %+v", page)
	}
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=dead&limit=1&cursor="+url.QueryEscape(page.Next), &page)
	if len(page.Keys) != 1 || page.Keys[0].Key != "stripe:evt_a" {
		t.Fatalf("dead, second page: %+v", page)
	}
	g.AdminJSON(t, http.MethodGet, "/idempotency/keys?state=failed", &page)
	if len(page.Keys) != 0 {
		t.Fatalf("failed after the window: %+v", page.Keys)
	}
	var rec journalView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("stripe:evt_a"), &rec)
	if rec.State != "dead" || rec.AttemptCount != 1 {
		t.Fatalf("inspect: %+v", rec)
	}
	if status, body := g.AdminDo(t, http.MethodGet, "/idempotency/keys?state=bogus"); status != 400 {
		t.Fatalf("state=bogus: %d %s", status, body)
	}
}

// TestJournalRedeliver: a failed notification redelivered through the
// admin API runs the backend once and is answered; the platform's next
// copy is replayed; a second redelivery of the answered key is refused
// without force and runs the backend again with it. An in-flight key
// cannot be purged without force.
func TestJournalRedeliver(t *testing.T) {
	testenv.Slow(t, "runs for seconds: a 3s backend holds a key in flight")
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if n == 1 {
			return 500, "not yet", 0
		}
		if order == "slow" {
			return 200, "ok", 3 * time.Second
		}
		return 200, "ok " + order + " " + r.Header.Get("X-Platform"), 0
	})
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	form := url.Values{"out_trade_no": {"r1"}, "total_amount": {"9.90"}}.Encode()
	if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", form, http.Header{"X-Platform": {"p"}}); r.Status != 500 {
		t.Fatalf("first copy: %d", r.Status)
	}
	var red RedeliveryView
	g.AdminJSON(t, http.MethodPost, gatewaytest.KeyURI("demo:r1")+"/redeliver", &red)
	if red.Status != 200 || red.Replayed || red.Body != "ok r1 p" {
		t.Fatalf("redelivery: %+v", red)
	}
	if n := be.Count("r1"); n != 2 {
		t.Fatalf("backend ran %d times, want 2 (the copy, the redelivery)", n)
	}
	if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded", form, nil); r.Status != 200 || !r.Replayed || r.Body != "ok r1 p" {
		t.Fatalf("platform's next copy: %+v", r)
	}
	status, body := g.AdminDo(t, http.MethodPost, gatewaytest.KeyURI("demo:r1")+"/redeliver")
	if status != http.StatusConflict || !strings.Contains(body, "already ran it") || strings.Contains(body, "force") {
		t.Fatalf("redelivery of an answered key: %d %s, want 409 saying the backend already ran it, proposing no force", status, body)
	}
	// Force alone is refused too: the backend already ran it, and only
	// again says it must run a second time.
	status, body = g.AdminDo(t, http.MethodPost, gatewaytest.KeyURI("demo:r1")+"/redeliver?force=1")
	if status != http.StatusConflict || !strings.Contains(body, "already ran it (answered at ") || !strings.Contains(body, "again=1") {
		t.Fatalf("forced redelivery of an answered key without again: %d %s, want 409 asking for again", status, body)
	}
	if n := be.Count("r1"); n != 2 {
		t.Fatalf("refused redelivery ran the backend: %d", n)
	}
	g.AdminJSON(t, http.MethodPost, gatewaytest.KeyURI("demo:r1")+"/redeliver?force=1&again=1", &red)
	if red.Status != 200 || !red.Reopened || be.Count("r1") != 3 {
		t.Fatalf("forced redelivery: %+v, backend %d", red, be.Count("r1"))
	}
	// The forced redelivery kept the key's history: the first copy's
	// failure, the first redelivery, the copy replayed, and now this one.
	var rec RecordView
	g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:r1"), &rec)
	if rec.State != "answered" || rec.AttemptCount != 3 || rec.Copies != 4 {
		t.Fatalf("record after the forced redelivery: state %s, %d attempts, %d copies; want answered, 3 attempts, 4 copies (history kept)",
			rec.State, rec.AttemptCount, rec.Copies)
	}
	if status, _ := g.AdminDo(t, http.MethodPost, gatewaytest.KeyURI("demo:nope")+"/redeliver"); status != 404 {
		t.Fatalf("redelivery of an unknown key: %d", status)
	}

	// Purge of an in-flight key: refused without force.
	be.Count("slow")
	done := make(chan gatewaytest.Reply, 1)
	go func() { done <- gatewaytest.Notify(t, g.Base, "slow") }() // 500 first: then a slow success
	<-done
	go func() { done <- gatewaytest.Notify(t, g.Base, "slow") }()
	gatewaytest.Eventually(t, 5*time.Second, "slow key in flight", func() bool {
		var rec journalView
		status, _ := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("demo:slow"))
		if status != 200 {
			return false
		}
		g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI("demo:slow"), &rec)
		return rec.State == "in_flight"
	})
	status, body = g.AdminDo(t, http.MethodDelete, gatewaytest.KeyURI("demo:slow"))
	if status != http.StatusConflict || !strings.Contains(body, "force") {
		t.Fatalf("purge of an in-flight key: %d %s, want 409 naming force", status, body)
	}
	if r := <-done; r.Status != 200 {
		t.Fatalf("slow copy: %+v", r)
	}
}
