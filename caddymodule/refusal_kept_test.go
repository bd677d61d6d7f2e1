package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// refusedSite: a Stripe route and a body-keyed generic route with a
// fingerprint and a small max_body, on one embedded store.
const refusedSite = `
	handle /stripe {
		idempotency {
			platform stripe
			secret whsec_refused
			store embedded {db}
		}
		reverse_proxy {backend}
	}
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope shop
			fingerprint {idempotency.form.total_amount}
			store embedded {db}
			max_body 256
		}
		reverse_proxy {backend}
	}`

func refusedList(t *testing.T, g gateway, query string) admin.RefusedView {
	t.Helper()
	var v admin.RefusedView
	g.adminJSON(t, http.MethodGet, "/idempotency/refused"+query, &v)
	return v
}

// TestRefusedListed: a notification refused before any claim — a 401 for
// a signature made with another secret (a rotation done on one side), a
// 400 for an empty key, a 413, a 422 conflict — is listed by the admin
// API, newest first, with its route, status, reason class, length,
// SHA-256 and first bytes as received, and no header; nothing is claimed
// for it and nothing reaches the backend. A 401's own key is never
// claimed. Answered notifications are not listed. The summary counts
// them.
func TestRefusedListed(t *testing.T) {
	be := newBackend(t)
	g := startGateway(t, strings.Trim(refusedSite, "\n"), "{backend}", be.addr(), "{db}", t.TempDir()+"/idem.db")

	// Signed with the secret before the rotation, as a sender that was
	// not told would.
	stripeBody := `{"id":"evt_rotated","type":"payment_intent.succeeded","data":{"object":{"amount":1000}}}` + "\x1b[2J"
	sig := fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 7)
	r := post(t, g.base+"/stripe", "application/json", stripeBody,
		http.Header{"Stripe-Signature": {sig}, "Authorization": {"Bearer sk_live_never_kept"}})
	if r.status != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d %q", r.status, r.body)
	}
	v := refusedList(t, g, "")
	if len(v.Refused) != 1 {
		t.Fatalf("listed %d refusals, want the 401: %+v", len(v.Refused), v)
	}
	rf := v.Refused[0]
	sum := sha256.Sum256([]byte(stripeBody))
	if rf.Status != 401 || rf.Class != "rejected_signature" || rf.Scope != "stripe" || rf.Route != "stripe#1" ||
		rf.Reason != "signature verification failed" || rf.Length != int64(len(stripeBody)) ||
		rf.SHA256 != hex.EncodeToString(sum[:]) || string(rf.Prefix) != stripeBody || rf.Key != "" {
		t.Fatalf("the 401 kept as %+v", rf)
	}
	if time.Since(rf.Time) > time.Minute || time.Since(rf.Time) < 0 {
		t.Errorf("kept at %v", rf.Time)
	}
	if _, raw := g.adminDo(t, http.MethodGet, "/idempotency/refused"); strings.Contains(raw, "sk_live") || strings.Contains(raw, sig) {
		t.Fatalf("a credential or the signature header is kept: %s", raw)
	}
	// Nothing claimed, nothing forwarded.
	for _, st := range []string{"in_flight", "answered", "failed"} {
		var page admin.PageView
		g.adminJSON(t, http.MethodGet, "/idempotency/keys?state="+st, &page)
		if len(page.Keys) != 0 {
			t.Fatalf("%s keys after a refusal: %+v", st, page.Keys)
		}
	}
	if n := be.totalHits(); n != 0 {
		t.Fatalf("the backend ran %d times for a refusal", n)
	}

	// The other refusals, and an answered notification that is not one.
	form := "application/x-www-form-urlencoded"
	if r := notify(t, g.base, "o-1"); r.status != 200 {
		t.Fatalf("first copy: %d %q", r.status, r.body)
	}
	big := "out_trade_no=o-2&pad=" + strings.Repeat("x", 300)
	for _, c := range []struct {
		body   string
		status int
	}{
		{"total_amount=9.90", 400},
		{big, 413},
		{"out_trade_no=o-1&total_amount=0.01", 422},
	} {
		if r := post(t, g.base+"/notify", form, c.body, nil); r.status != c.status {
			t.Fatalf("%q: %d %q, want %d", c.body, r.status, r.body, c.status)
		}
	}
	v = refusedList(t, g, "?scope=shop")
	if len(v.Refused) != 3 {
		t.Fatalf("scope shop lists %d, want 3: %+v", len(v.Refused), v.Refused)
	}
	conflict, tooLarge, empty := v.Refused[0], v.Refused[1], v.Refused[2]
	if conflict.Status != 422 || conflict.Class != "conflict" || conflict.Key != "shop:o-1" ||
		string(conflict.Prefix) != "out_trade_no=o-1&total_amount=0.01" {
		t.Errorf("the conflict kept as %+v", conflict)
	}
	if tooLarge.Status != 413 || tooLarge.Class != "too_large" || tooLarge.Length != int64(len(big)) ||
		tooLarge.SHA256 != "" || len(tooLarge.Prefix) != 0 {
		t.Errorf("the 413 (not read: too large by its length) kept as %+v", tooLarge)
	}
	if empty.Status != 400 || empty.Class != "bad_request" || empty.Reason != "key: {idempotency.form.out_trade_no} is empty" ||
		string(empty.Prefix) != "total_amount=9.90" || empty.Route != "shop#1" {
		t.Errorf("the empty key kept as %+v", empty)
	}
	if all := refusedList(t, g, ""); len(all.Refused) != 4 || all.Refused[3].Status != 401 {
		t.Errorf("every scope lists %d, the oldest last: %+v", len(all.Refused), all.Refused)
	}
	// since: the refusals from the conflict on.
	if v := refusedList(t, g, "?since="+url.QueryEscape(conflict.Time.Format(time.RFC3339Nano))); len(v.Refused) == 0 || v.Refused[0].Status != 422 {
		t.Errorf("since the conflict: %+v", v.Refused)
	}
	if v := refusedList(t, g, "?since=1ns"); len(v.Refused) != 0 {
		t.Errorf("since a nanosecond ago: %+v", v.Refused)
	}
	if st, body := g.adminDo(t, http.MethodGet, "/idempotency/refused?since=yesterday"); st != 400 || !strings.Contains(body, "RFC 3339") {
		t.Errorf("a bad since: %d %s", st, body)
	}
	// The summary counts them (the last 24h), per scope too; no amount.
	var summary admin.SummaryView
	g.adminJSON(t, http.MethodGet, "/idempotency/summary", &summary)
	if summary.Refused == nil || summary.Refused.Count != 4 || summary.Refused.AtLeast || time.Since(summary.Refused.Since) < 23*time.Hour {
		t.Errorf("summary's refused: %+v", summary.Refused)
	}
	summary = admin.SummaryView{}
	g.adminJSON(t, http.MethodGet, "/idempotency/summary?scope=shop", &summary)
	if summary.Refused == nil || summary.Refused.Count != 3 {
		t.Errorf("summary's refused in scope shop: %+v", summary.Refused)
	}
	if n := be.totalHits(); n != 1 {
		t.Errorf("the backend ran %d times, want 1 (the first copy only)", n)
	}
}

// TestRefusedStoreStalled: with the store's Redis stalled (SIGSTOP), a
// refusal is still answered at once — keeping it is bounded far below
// store_timeout — and the failure to keep it is logged.
func TestRefusedStoreStalled(t *testing.T) {
	testenv.Slow(t, "fault: Redis paused")
	rs := redistest.Start(t)
	be := newBackend(t)
	dir := t.TempDir()
	logFile := dir + "/caddy.log"
	base := startCaddyWith(t, caddyGlobals{log: "output file " + logFile + "\n\t\tformat json"}, `
	handle /stripe {
		idempotency {
			platform stripe
			secret whsec_refused
			store redis {redis}
			store_timeout 10s
		}
		reverse_proxy {backend}
	}`, "{backend}", be.addr(), "{redis}", rs.Addr())
	sig := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 7)}}
	body := `{"id":"evt_stalled","type":"x"}`
	if r := post(t, base+"/stripe", "application/json", body, sig); r.status != 401 {
		t.Fatalf("bad signature: %d %q", r.status, r.body)
	}
	defer rs.Resumer()()
	rs.Pause()
	start := time.Now()
	r := post(t, base+"/stripe", "application/json", body, sig)
	took := time.Since(start)
	if r.status != 401 || !strings.HasPrefix(r.body, "401 signature verification failed") {
		t.Fatalf("with the store stalled: %d %q", r.status, r.body)
	}
	if took > 3*time.Second { // store_timeout is 10s; the bound 250ms, a loaded machine aside
		t.Fatalf("the refusal took %v with the store stalled", took)
	}
	eventually(t, 5*time.Second, "the failure to keep it in the log", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "keeping a refused notification in the store failed")
	})
	if n := be.totalHits(); n != 0 {
		t.Fatalf("the backend ran %d times", n)
	}
}
