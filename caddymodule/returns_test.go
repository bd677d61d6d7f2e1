package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/reconcile"
)

// The `return` tests: what Alipay's signed browser return is on a route,
// in front of the two kinds of backend it is chosen for, each verifying
// every request with smartwalle/alipay and counting its business runs
// (internal/sdkbackend). The sites are docs/platforms.md's recipes as
// written there, with the test's key, backend and store put in.

// docRecipe is the caddyfile block of docs/platforms.md that sets
// `return <setting>`.
func docRecipe(t *testing.T, setting string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "platforms.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```caddyfile\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if regexp.MustCompile(`(?m)^\s*return ` + setting + `\b`).MatchString(block) {
			return block
		}
	}
	t.Fatalf("docs/platforms.md has no recipe with `return %s`", setting)
	return ""
}

// returnSite runs recipe with the test's Alipay key, backend and an
// embedded store shared by its routes, logging warnings to a file.
type returnSite struct {
	gateway
	log    string
	signer platformtest.Alipay
}

func startReturnSite(t *testing.T, recipe string, be *sdkbackend.Backend, a platformtest.Alipay, pub string) returnSite {
	t.Helper()
	site := recipeSite(t, recipe, be, pub)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	admin := fmt.Sprintf("127.0.0.1:%d", gatewaytest.FreePort(t))
	base := gatewaytest.StartCaddyWith(t, gatewaytest.Globals{Admin: admin,
		Log: "output file " + logFile + "\n\t\tformat json\n\t\tlevel WARN"}, site)
	gatewaytest.WaitListening(t, "http://"+admin)
	return returnSite{gateway: gateway{base: base, admin: admin}, log: logFile, signer: a}
}

// recipeSite is recipe with the test's public key, be behind it and an
// embedded store of its own put in.
func recipeSite(t *testing.T, recipe string, be *sdkbackend.Backend, pub string) string {
	t.Helper()
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)
	db := filepath.Join(t.TempDir(), "idem.db")
	return strings.NewReplacer(
		"{env.ALIPAY_PUBLIC_KEY_FILE}", pub,
		"127.0.0.1:9090", strings.TrimPrefix(srv.URL, "http://"),
		"\t\tplatform alipay\n", "\t\tplatform alipay\n\t\tstore embedded "+db+"\n",
	).Replace(recipe)
}

func (s returnSite) ret(t *testing.T, trade string) delivery {
	return delivery{method: http.MethodGet, path: "/return",
		query: s.signer.Query(t, platformtest.AlipayReturn(testAlipayAppID, "o-"+trade, trade, "88.88"))}
}

func (s returnSite) notify(t *testing.T, trade string) delivery {
	return delivery{path: "/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8",
		body: s.signer.Body(t, platformtest.AlipayNotify(testAlipayAppID, "o-"+trade, trade, "TRADE_SUCCESS", "88.88"))}
}

// alipayKeys is a signing key and its public key's file and PEM.
func alipayKeys(t *testing.T) (platformtest.Alipay, string, string) {
	k, _ := platformtest.Keys(t)
	pem := platformtest.PublicKeyPEM(t, &k.PublicKey)
	return platformtest.Alipay{Key: k}, platformtest.WriteFile(t, "alipay_public_key.pem", pem), string(pem)
}

// orderPage is the admin API's page of trade's order.
func (s returnSite) orderPage(t *testing.T, trade string) adminapi.OrderView {
	var ov adminapi.OrderView
	s.adminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape("alipay:"+testAlipayAppID+":"+trade), &ov)
	return ov
}

// TestAlipayReturnRefusedByDefault: a route that receives Alipay's signed
// return without saying what it is (no `return` line, the display recipe
// without it) answers it 405, naming `return business` and `return
// display`, claims nothing and forwards nothing; the log and the refused
// list say why. Alipay's notify then runs the notify-only backend's
// payment once. Before `return`, the return was the order's paid event:
// the notify was answered `success` from it and the payment never ran.
func TestAlipayReturnRefusedByDefault(t *testing.T) {
	a, pub, pem := alipayKeys(t)
	recipe := regexp.MustCompile(`(?m)^\s*return display.*\n`).ReplaceAllString(docRecipe(t, "display"), "")
	be := sdkbackend.AlipayNotifyOnly(pem)
	s := startReturnSite(t, recipe, be, a, pub)
	const trade = "2026031422001437971000000101"

	r := send(t, s.base, trade, s.ret(t, trade))
	if r.status != http.StatusMethodNotAllowed || !strings.Contains(r.body, "return business") || !strings.Contains(r.body, "return display") ||
		r.header.Get("Allow") != "POST" || len(r.body) > 200 {
		t.Fatalf("signed return: %d %q (Allow %q), want a short 405 naming `return business` and `return display`", r.status, r.body, r.header.Get("Allow"))
	}
	if n := be.Attempts(); n != 0 {
		t.Fatalf("the refused return reached the backend %d times", n)
	}
	for _, key := range []string{"paid", "return"} {
		if st, body := s.adminDo(t, http.MethodGet, keyURI("alipay:"+testAlipayAppID+":"+trade+":"+key)); st != http.StatusNotFound {
			t.Errorf("key …:%s after the refused return: %d %s, want none claimed", key, st, body)
		}
	}
	var refused adminapi.RefusedView
	s.adminJSON(t, http.MethodGet, "/idempotency/refused?scope=alipay", &refused)
	if len(refused.Refused) != 1 || refused.Refused[0].Status != http.StatusMethodNotAllowed ||
		!strings.Contains(refused.Refused[0].Reason, "return business") || !strings.Contains(refused.Refused[0].Reason, "return display") {
		t.Errorf("refused list: %+v, want the return, naming `return business` and `return display`", refused.Refused)
	}
	eventually(t, 5*time.Second, "the refusal's log line", func() bool {
		return len(logLines(t, s.log, "does not take its channel")) == 1
	})
	if line := logLines(t, s.log, "does not take its channel")[0]; !strings.Contains(fmt.Sprint(line["error"]), "return refuse") {
		t.Errorf("the log line should give the whole reason, got %v", line)
	}

	for i := range 2 {
		if r := send(t, s.base, trade, s.notify(t, trade)); r.status != 200 || r.body != "success" || r.replayed != (i > 0) {
			t.Fatalf("notify %d: %d %q replayed=%v", i, r.status, r.body, r.replayed)
		}
	}
	if n := be.Runs(trade + ":paid"); n != 1 || be.Total() != 1 || len(be.Refusals()) != 0 {
		t.Fatalf("the backend ran %v, refused %v; want the payment run once, by the notify", be.Events(), be.Refusals())
	}
}

// TestAlipayReturnDisplay: `return display` in front of a backend that
// runs the payment on the notify only and shows a page on the return, as
// Alipay asks. Return first: the page is forwarded once and its reload
// replayed; the notify still reaches the backend and runs the payment
// once. Notify first: the same. The order's page shows the payment run by
// the notify. Before, the return took the order's paid event and the
// payment never ran.
func TestAlipayReturnDisplay(t *testing.T) {
	a, pub, pem := alipayKeys(t)
	be := sdkbackend.AlipayNotifyOnly(pem)
	s := startReturnSite(t, docRecipe(t, "display"), be, a, pub)

	const first, second = "2026031422001437971000000201", "2026031422001437971000000202"
	page := func(trade string, replayed bool) {
		t.Helper()
		r := send(t, s.base, trade, s.ret(t, trade))
		if r.status != 200 || !strings.Contains(r.body, "Thank you: "+trade) || r.replayed != replayed {
			t.Fatalf("return of %s: %d %q replayed=%v, want the page (replayed=%v)", trade, r.status, r.body, r.replayed, replayed)
		}
	}
	notify := func(trade string, replayed bool) {
		t.Helper()
		r := send(t, s.base, trade, s.notify(t, trade))
		if r.status != 200 || r.body != "success" || r.replayed != replayed {
			t.Fatalf("notify of %s: %d %q replayed=%v, want success (replayed=%v)", trade, r.status, r.body, r.replayed, replayed)
		}
	}
	page(first, false) // return first
	page(first, true)  // the browser reloads
	notify(first, false)
	notify(first, true) // Alipay's retry
	page(first, true)

	notify(second, false) // notify first
	page(second, false)
	page(second, true)

	for _, trade := range []string{first, second} {
		if p, pg := be.Runs(trade+":paid"), be.Runs("page:"+trade); p != 1 || pg != 1 {
			t.Errorf("%s: the payment ran %d times and the page was shown %d times, want once each", trade, p, pg)
		}
		ov := s.orderPage(t, trade)
		if len(ov.Events) != 1 || ov.Events[0].Event != "paid" || ov.Events[0].Channel != "POST /notify" {
			t.Errorf("%s: order page %+v, want the paid event only, run via POST /notify", trade, ov.Events)
		}
	}
	if len(be.Refusals()) != 0 {
		t.Errorf("the SDK refused %v", be.Refusals())
	}
}

// TestAlipayReturnBusiness: `return business` in front of a backend that
// runs the payment on both channels. The return comes first and runs it;
// Alipay's notify is answered `success` without reaching the backend, a
// reload is redirected to the order; the payment ran once, and the
// order's page and reconciliation say it ran via the return.
func TestAlipayReturnBusiness(t *testing.T) {
	a, pub, pem := alipayKeys(t)
	be := sdkbackend.AlipayBothChannels(pem)
	s := startReturnSite(t, docRecipe(t, "business"), be, a, pub)
	const trade = "2026031422001437971000000301"

	if r := send(t, s.base, trade, s.ret(t, trade)); r.status != 200 || !strings.Contains(r.body, "Thank you") || r.replayed {
		t.Fatalf("return: %d %q replayed=%v, want the backend's page", r.status, r.body, r.replayed)
	}
	for i := range 2 {
		if r := send(t, s.base, trade, s.notify(t, trade)); r.status != 200 || r.body != "success" || !r.replayed {
			t.Fatalf("notify %d: %d %q replayed=%v, want Alipay's success, answered from the return", i, r.status, r.body, r.replayed)
		}
	}
	if r := send(t, s.base, trade, s.ret(t, trade)); r.status != http.StatusFound || r.header.Get("Location") != "https://shop.example.com/orders/o-"+trade {
		t.Fatalf("reload: %d (Location %q), want the redirect to the order", r.status, r.header.Get("Location"))
	}
	if n := be.Runs(trade + ":paid"); n != 1 || be.Total() != 1 || len(be.Refusals()) != 0 {
		t.Fatalf("the backend ran %v, refused %v; want the payment run once", be.Events(), be.Refusals())
	}

	ov := s.orderPage(t, trade)
	if len(ov.Events) != 1 || ov.Events[0].Event != "paid" || ov.Events[0].Channel != "GET /return" {
		t.Errorf("order page %+v, want the paid event run via GET /return", ov.Events)
	}
	now := time.Now()
	bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", now.Add(-12*time.Hour), now.Add(12*time.Hour))
	}, []billtest.Row{{Kind: billtest.Payment, Order: trade, MerchantOrder: "o-" + trade, Amount: "88.88", Currency: "CNY", Time: now}})
	resp, err := gatewaytest.Client.Post("http://"+s.admin+"/idempotency/reconcile?platform=alipay&items=1", "text/csv", bytes.NewReader(bill))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep reconcile.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != 200 {
		t.Fatalf("reconcile: %d %v", resp.StatusCode, err)
	}
	if rep.Matched.Count != 1 || len(rep.Matched.Items) != 1 ||
		!strings.Contains(rep.Matched.Items[0].Note, "ran via GET /return; the notify was answered from it") {
		t.Errorf("reconciliation: matched %+v, want the payment, noted as run via GET /return", rep.Matched)
	}
}

// TestAlipaySuccessBodyJudgesNotify: `success 200 body success` copied
// onto the `return business` route judges the notify, not the page: the
// return's 200 page is the payment's answer, its reloads and the notify
// never run the backend again. Judged by the rule, the page was a
// failure, released, and each reload ran the payment again.
func TestAlipaySuccessBodyJudgesNotify(t *testing.T) {
	a, pub, pem := alipayKeys(t)
	be := sdkbackend.AlipayBothChannels(pem)
	recipe := regexp.MustCompile(`(?m)^(\s*)return business.*\n`).ReplaceAllString(docRecipe(t, "business"),
		"${1}return business\n${1}success 200 body success\n")
	s := startReturnSite(t, recipe, be, a, pub)
	const trade = "2026031422001437971000000401"

	if r := send(t, s.base, trade, s.ret(t, trade)); r.status != 200 || r.replayed {
		t.Fatalf("return: %d %q replayed=%v, want the backend's page", r.status, r.body, r.replayed)
	}
	for i := range 3 {
		if r := send(t, s.base, trade, s.ret(t, trade)); r.status != http.StatusFound || !r.replayed {
			t.Fatalf("reload %d: %d %q replayed=%v, want the redirect to the order", i, r.status, r.body, r.replayed)
		}
	}
	if r := send(t, s.base, trade, s.notify(t, trade)); r.status != 200 || r.body != "success" || !r.replayed {
		t.Fatalf("notify: %d %q replayed=%v, want Alipay's success, answered from the return", r.status, r.body, r.replayed)
	}
	if n := be.Runs(trade + ":paid"); n != 1 || be.Attempts() != 1 {
		t.Fatalf("the backend was reached %d times and ran the payment %d times, want once", be.Attempts(), n)
	}
	if lines := logLines(t, s.log, "backend answered failure"); len(lines) != 0 {
		t.Errorf("the return's page was judged a failure: %v", lines)
	}
}

// TestAlipayReturnRecipesProcess runs docs/platforms.md's recipes in the
// built binary, each in front of the backend it is for: with no `return`
// line a signed return is a 405 and the notify-only backend's payment runs
// by the notify; with `return display` the page is shown once and
// replayed, and the notify runs the payment; with `return business` the
// both-channel backend runs the payment by the return, and the notify is
// answered success from it. Each payment ran once.
func TestAlipayReturnRecipesProcess(t *testing.T) {
	testenv.Slow(t, "builds and runs the idemgate binary")
	a, pub, pem := alipayKeys(t)
	s := returnSite{signer: a}
	for _, c := range []struct {
		name    string
		recipe  string
		backend *sdkbackend.Backend
		// after the return and a reload, then the notify and its retry:
		// statuses, and the backend's counts
		ret, reload, notify, retry int
		paid, page                 int
	}{
		{"no return line", regexp.MustCompile(`(?m)^\s*return display.*\n`).ReplaceAllString(docRecipe(t, "display"), ""),
			sdkbackend.AlipayNotifyOnly(pem), 405, 405, 200, 200, 1, 0},
		{"return display", docRecipe(t, "display"), sdkbackend.AlipayNotifyOnly(pem), 200, 200, 200, 200, 1, 1},
		{"return business", docRecipe(t, "business"), sdkbackend.AlipayBothChannels(pem), 200, http.StatusFound, 200, 200, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := startProc(t, t.TempDir(), recipeSite(t, c.recipe, c.backend, pub))
			const trade = "2026031422001437971000000501"
			got := []int{send(t, gw.base, trade, s.ret(t, trade)).status, send(t, gw.base, trade, s.ret(t, trade)).status}
			n := send(t, gw.base, trade, s.notify(t, trade))
			r := send(t, gw.base, trade, s.notify(t, trade))
			got = append(got, n.status, r.status)
			if want := []int{c.ret, c.reload, c.notify, c.retry}; fmt.Sprint(got) != fmt.Sprint(want) || n.body != "success" || r.body != "success" {
				t.Fatalf("return, reload, notify, retry: %v (notify %q, retry %q), want %v and success", got, n.body, r.body, want)
			}
			if p, pg := c.backend.Runs(trade+":paid"), c.backend.Runs("page:"+trade); p != c.paid || pg != c.page || len(c.backend.Refusals()) != 0 {
				t.Fatalf("the backend ran %v, refused %v; want the payment %d, the page %d", c.backend.Events(), c.backend.Refusals(), c.paid, c.page)
			}
		})
	}
}

// TestReturnRefusedOffAlipay: `return` on a platform without a browser
// return does not start, and says it is Alipay's.
func TestReturnRefusedOffAlipay(t *testing.T) {
	cf := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	log {
		level ERROR
	}
}
http://127.0.0.1:%d {
	idempotency {
		platform stripe
		secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
		return display
		store memory
	}
	respond "unreachable"
}
`, freePort(t))
	// The platform's module parses its own subdirectives, so the adapter
	// refuses it; a JSON config of it is refused at load (no such field).
	cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
	if err == nil {
		err = caddy.Load(cfgJSON, true)
	}
	if err == nil {
		caddy.Stop()
		t.Fatal("a stripe route with `return` started")
	} else if !strings.Contains(err.Error(), "return is for alipay only") {
		t.Fatalf("error %q should say `return` is Alipay's", err)
	}
}
