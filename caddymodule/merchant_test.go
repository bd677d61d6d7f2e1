package caddymodule

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// merchantSite is an Alipay route that accepts one app_id, not the one the
// test notifications are signed for.
const merchantSite = `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id 2021000000000999
			store embedded {db}
		}
		reverse_proxy {backend}
	}`

// TestMerchantNotAccepted: a notification whose signature verifies but
// whose app_id the route does not accept is refused as "merchant not
// accepted" (403), in the answer, the refused list and the metric's
// outcome, never as "signature verification failed" (which sent ops
// chasing a key rotation); a signed notification that names no merchant
// is malformed (400). Neither reaches the backend.
func TestMerchantNotAccepted(t *testing.T) {
	a := newAlipayOrders(t)
	be := newBackend(t)
	g := startGateway(t, strings.Trim(merchantSite, "\n"), "{pub}", a.pub, "{backend}", be.addr(), "{db}", t.TempDir()+"/idem.db")
	base, _ := scrape(t, g)

	r := send(t, g.base, "m-1", a.notify("2026031422001437971000000101", "TRADE_SUCCESS"))
	if r.status != http.StatusForbidden || r.body != "403 merchant not accepted\n" {
		t.Fatalf("another app's signed notification: %d %q, want 403 merchant not accepted", r.status, r.body)
	}
	v := refusedList(t, g, "")
	if len(v.Refused) != 1 {
		t.Fatalf("listed %d refusals, want the 403: %+v", len(v.Refused), v)
	}
	if rf := v.Refused[0]; rf.Status != 403 || rf.Class != "rejected_merchant" || rf.Reason != "merchant not accepted" || rf.Scope != "alipay" {
		t.Fatalf("the 403 kept as %+v", rf)
	}
	s, _ := scrape(t, g)
	wantDelta(t, s, base, `idemgate_requests_total{outcome="rejected_merchant",platform="alipay",scope="alipay"}`, 1)
	if sig := `idemgate_requests_total{outcome="rejected_signature",platform="alipay",scope="alipay"}`; s[sig] != base[sig] {
		t.Errorf("%s counted the refusal", sig)
	}

	// Signed, but with no app_id at all: malformed, not a signature problem.
	p := platformtest.AlipayNotify(testAlipayAppID, "o-m2", "2026031422001437971000000102", "TRADE_SUCCESS", "88.88")
	p.Del("app_id")
	r = send(t, g.base, "m-2", delivery{path: "/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8", body: a.signer.Body(t, p)})
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "malformed notification") || strings.Contains(r.body, "signature") {
		t.Fatalf("a signed notification without app_id: %d %q, want 400 malformed", r.status, r.body)
	}
	if n := be.totalHits(); n != 0 {
		t.Fatalf("refused notifications reached the backend %d times", n)
	}
}

// TestMerchantNotAcceptedLogged: the running gateway's log names the
// refusal's class and its cause (which app_id), and says nothing of a
// signature.
func TestMerchantNotAcceptedLogged(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	a := newAlipayOrders(t)
	be := newBackend(t)
	site := strings.NewReplacer("{pub}", a.pub, "{backend}", be.addr(), "{db}", t.TempDir()+"/idem.db").Replace(merchantSite)
	gw := startProc(t, t.TempDir(), site)
	r := send(t, gw.base, "m-3", a.notify("2026031422001437971000000103", "TRADE_SUCCESS"))
	if r.status != http.StatusForbidden || r.body != "403 merchant not accepted\n" {
		t.Fatalf("another app's signed notification: %d %q", r.status, r.body)
	}
	var line string
	for deadline := time.Now().Add(5 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(gw.log)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `"logger":"http.handlers.idempotency"`) && strings.Contains(l, `"outcome":"rejected_merchant"`) {
				line = l
			}
		}
	}
	want := fmt.Sprintf(`alipay: merchant not accepted: app_id \"%s\" is not one of the configured app_id`, testAlipayAppID)
	if line == "" || !strings.Contains(line, want) || !strings.Contains(line, `"level":"warn"`) {
		b, _ := os.ReadFile(gw.log)
		t.Fatalf("no warn line with outcome rejected_merchant naming %s:\n%s", want, b)
	}
	if b, _ := os.ReadFile(gw.log); strings.Contains(string(b), "signature verification failed") {
		t.Fatalf("the log speaks of a signature:\n%s", b)
	}
}
