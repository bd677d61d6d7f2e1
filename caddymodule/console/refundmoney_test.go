package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/admin"
	_ "github.com/idemgate/idemgate/caddymodule/command" // list and inspect, as the binary runs them
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/reconcile"
)

// TestRefundMoneyOwnOnEverySurface: three Alipay refunds of 30.00, 20.00
// and 10.00 of a 129.00 trade, signed as Alipay does (refund_fee the
// trade's refunded total: 30.00, 50.00, 60.00), sent in order and out of
// order (60.00 first), answered and failed, through the real module on
// every store (Redis a real redis-server). Each refund shows its own
// money, 30.00, 20.00 and 10.00, on every surface: search, the order
// page, the key page, `list`, `inspect`, the money at stake (refunds as
// refund_amounts: 120.00 CNY owed for two failed trades, not 280.00), the
// console's overview, order and search pages, and reconciliation's items.
// While a refund's predecessors have not arrived, it shows its increase
// over those that have (its whole refund_fee when none has).
func TestRefundMoneyOwnOnEverySurface(t *testing.T) {
	testenv.Slow(t, "starts redis-server and the gateway on every store")
	gatewaytest.EachStore(t, func(t *testing.T, _, store string) {
		k, _ := platformtest.Keys(t)
		alipay := platformtest.Alipay{Key: k}
		pub := platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
		be := gatewaytest.NewBackend(t)
		be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
			if strings.HasPrefix(order, "o-F") {
				return 502, "database is down", 0
			}
			return 200, "success", 0
		})
		g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key {pub}
			app_id `+refundApp+`
			{store}
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{pub}", pub, "{store}", store, "{backend}", be.Addr())
		now := time.Now()
		beijing := now.In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)
		send := func(label string, params url.Values, want int) {
			t.Helper()
			r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded; charset=utf-8", alipay.Body(t, params), nil)
			if r.Status != want {
				t.Fatalf("%s: %+v, want %d", label, r, want)
			}
		}
		refund := func(trade, biz, fee string, want int) {
			t.Helper()
			p := platformtest.AlipayNotify(refundApp, "o-"+trade, refundTrade(trade), "TRADE_SUCCESS", "129.00")
			p.Set("gmt_payment", beijing)
			p.Set("out_biz_no", biz)
			p.Set("refund_fee", fee)
			p.Set("gmt_refund", beijing)
			send(trade+" "+biz, p, want)
		}
		paid := func(trade string) {
			t.Helper()
			p := platformtest.AlipayNotify(refundApp, "o-"+trade, refundTrade(trade), "TRADE_SUCCESS", "129.00")
			p.Set("gmt_payment", beijing)
			send(trade+" paid", p, 200)
		}
		orderAmounts := func(trade string) map[string]string {
			t.Helper()
			var v admin.OrderView
			g.AdminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape(refundOrder(trade)), &v)
			out := map[string]string{}
			for _, e := range v.Events {
				out[e.Event] = e.Amount
			}
			return out
		}

		// R1: in order, answered. R2: out of order, answered, with the
		// figures shown while its earlier refunds are missing.
		paid("R1")
		refund("R1", "rf-1", "30.00", 200)
		refund("R1", "rf-2", "50.00", 200)
		refund("R1", "rf-3", "60.00", 200)
		paid("R2")
		refund("R2", "rf-3", "60.00", 200)
		if a := orderAmounts("R2"); a["refund:rf-3"] != "60.00" {
			t.Errorf("R2 with only its third refund: %v, want refund:rf-3 60.00 (its increase over the refunds known: none)", a)
		}
		refund("R2", "rf-1", "30.00", 200)
		if a := orderAmounts("R2"); a["refund:rf-3"] != "30.00" || a["refund:rf-1"] != "30.00" {
			t.Errorf("R2 with its first and third refunds: %v, want refund:rf-1 30.00 and refund:rf-3 30.00", a)
		}
		refund("R2", "rf-2", "50.00", 200)
		// F1: in order, failed. F2: out of order, failed.
		refund("F1", "rf-1", "30.00", 502)
		refund("F1", "rf-2", "50.00", 502)
		refund("F1", "rf-3", "60.00", 502)
		refund("F2", "rf-3", "60.00", 502)
		refund("F2", "rf-1", "30.00", 502)
		refund("F2", "rf-2", "50.00", 502)

		own := map[string]string{"refund:rf-1": "30.00", "refund:rf-2": "20.00", "refund:rf-3": "10.00"}
		addr := []string{"--address", g.Admin}
		for _, trade := range []string{"R1", "R2", "F1", "F2"} {
			answered := strings.HasPrefix(trade, "R")
			// Search.
			var sv admin.SearchView
			g.AdminJSON(t, http.MethodGet, "/idempotency/search?q=o-"+trade, &sv)
			found := map[string]string{}
			for _, m := range sv.Matches {
				if strings.HasPrefix(m.Event, "refund:") {
					found[m.Event] = m.Amount + " " + m.Currency
				}
			}
			_, consoleSearch := getPage(t, g.Base+"/console/search?q=o-"+trade)
			var consoleOrder string
			if answered {
				_, consoleOrder = getPage(t, g.Base+"/console/order?o="+url.QueryEscape(refundOrder(trade)))
			}
			orderPage := map[string]string{}
			if answered {
				orderPage = orderAmounts(trade)
			}
			state := "failed"
			if answered {
				state = "answered"
			}
			list, err := gatewaytest.RunCLI(t, &bytes.Buffer{}, append([]string{"list", "--state", state, "--prefix", refundOrder(trade) + ":"}, addr...)...)
			if err != nil {
				t.Fatalf("list: %v\n%s", err, list)
			}
			for event, want := range own {
				key := refundOrder(trade) + ":" + event
				if found[event] != want+" CNY" {
					t.Errorf("%s search: %s is %q, want %s CNY", trade, event, found[event], want)
				}
				if !strings.Contains(rowOf(consoleSearch, "<code>"+event+"</code>"), ">"+want+" CNY<") {
					t.Errorf("%s console search: the row of %s lacks %s CNY:\n%s", trade, event, want, rowOf(consoleSearch, "<code>"+event+"</code>"))
				}
				if answered {
					if orderPage[event] != want {
						t.Errorf("%s order page: %s is %q, want %s", trade, event, orderPage[event], want)
					}
					if !strings.Contains(rowOf(consoleOrder, "<code>"+event+"</code>"), ">"+want+" CNY<") {
						t.Errorf("%s console order page: the row of %s lacks %s CNY:\n%s", trade, event, want, rowOf(consoleOrder, "<code>"+event+"</code>"))
					}
				}
				var rv admin.RecordView
				g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key), &rv)
				if rv.Amount == nil || rv.Amount.Value != want || rv.Amount.Currency != "CNY" || !rv.Amount.Refund {
					t.Errorf("%s key page of %s: amount %+v, want a refund of %s CNY", trade, event, rv.Amount, want)
				}
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` +` + state + ` +\S+ .* ` + regexp.QuoteMeta(want) + ` CNY refund`).MatchString(list) {
					t.Errorf("%s list: no row of %s with %s CNY:\n%s", trade, key, want, list)
				}
				out, err := gatewaytest.RunCLI(t, &bytes.Buffer{}, append([]string{"inspect", key}, addr...)...)
				if err != nil || !regexp.MustCompile(`(?m)^amount +`+regexp.QuoteMeta(want)+` CNY \(a refund`).MatchString(out) {
					t.Errorf("%s inspect %s: %v, want amount %s CNY:\n%s", trade, key, err, want, out)
				}
			}
		}

		// The money at stake: two failed trades' refunds, 60.00 each.
		var s admin.SummaryView
		g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &s)
		if s.Failed.Count != 6 || s.Failed.RefundAmounts["CNY"] != "120.00" || len(s.Failed.Amounts) != 0 || s.Failed.WithoutAmount != 0 {
			t.Errorf("failed money at stake: %+v, want 6 keys and 120.00 CNY of refunds owed (30 + 20 + 10 twice)", s.Failed)
		}
		_, page := getPage(t, g.Base+"/console/")
		if failed := stakeText(section(page, "stake"), "failed"); !strings.Contains(failed, "120.00 CNY of refunds owed") {
			t.Errorf("console's failed money at stake: %q, want 120.00 CNY of refunds owed", failed)
		}

		// Reconciliation: R1's bill has its payment and first two refunds;
		// its third, and R2's refunds, ran but are in no bill row.
		var bill bytes.Buffer
		w := alipaybill.NewWriter(&bill, "20881021772966100156", now.Add(-2*time.Hour), now.Add(2*time.Hour))
		for _, r := range []billtest.Row{
			{Kind: billtest.Payment, Order: refundTrade("R1"), MerchantOrder: "o-R1", Amount: "129.00", Currency: "CNY", Time: now},
			{Kind: billtest.Refund, Order: refundTrade("R1"), MerchantOrder: "o-R1", Refund: "rf-1", Amount: "30.00", Currency: "CNY", Time: now},
			{Kind: billtest.Refund, Order: refundTrade("R1"), MerchantOrder: "o-R1", Refund: "rf-2", Amount: "20.00", Currency: "CNY", Time: now},
		} {
			if err := w.Row(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var rep reconcile.Report
		req, err := http.NewRequest(http.MethodPost, "http://"+g.Admin+"/idempotency/reconcile?platform=alipay&items=1&limit=1000", &bill)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/csv")
		resp, err := gatewaytest.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("reconcile: %d %v", resp.StatusCode, err)
		}
		notified := map[string]string{}
		for _, c := range []reconcile.Category{rep.Matched, rep.RunNotSettled, rep.AmountDiffers} {
			for _, it := range c.Items {
				notified[it.Key] = it.NotifiedAmount
			}
		}
		if rep.AmountDiffers.Count != 0 {
			t.Errorf("reconciliation: amount differs: %+v", rep.AmountDiffers.Items)
		}
		for _, trade := range []string{"R1", "R2"} {
			for event, want := range own {
				if key := refundOrder(trade) + ":" + event; notified[key] != want {
					t.Errorf("reconciliation: %s notified %q, want %s (matched %d, run not settled %d)", key, notified[key], want, rep.Matched.Count, rep.RunNotSettled.Count)
				}
			}
		}
	})
}

const refundApp = "2021000000000001"

// refundTrade is the trade_no of a trade of TestRefundMoneyOwnOnEverySurface.
func refundTrade(label string) string { return fmt.Sprintf("20261204220%x", label) }

func refundOrder(label string) string { return "alipay:" + refundApp + ":" + refundTrade(label) }

// rowOf is the table row of page that holds marker.
func rowOf(page, marker string) string {
	i := strings.Index(page, marker)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(page[:i], "<tr")
	end := strings.Index(page[i:], "</tr>")
	if start < 0 || end < 0 {
		return ""
	}
	return page[start : i+end]
}

// TestStripeRefundMoneyOnEverySurface: two refunds of 30.00 and 20.00 of
// one 129.00 charge, each a charge.refunded event as Stripe sends it (the
// charge, amount_refunded 3000 then 5000, the earlier total in
// data.previous_attributes), as send signs them with --refunded-before;
// answered on one charge, failed on another. Each event shows what it
// refunded, 30.00 and 20.00 USD, never the charge's 129.00: search by the
// charge, the key page, `list`, the money at stake (50.00 USD owed) and
// the console's search page.
func TestStripeRefundMoneyOnEverySurface(t *testing.T) {
	testenv.Slow(t, "starts redis-server and the gateway on every store")
	gatewaytest.EachStore(t, func(t *testing.T, _, store string) {
		const secret = "whsec_refundmoney"
		ok, broken := gatewaytest.NewBackend(t), gatewaytest.NewBackend(t)
		broken.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 502, "database is down", 0 })
		g := gatewaytest.StartGateway(t, `
	handle /stripe {
		idempotency {
			platform stripe
			secret `+secret+`
			{store}
		}
		reverse_proxy {ok}
	}
	handle /stripe-failing {
		idempotency {
			platform stripe
			secret `+secret+`
			scope stripe_failing
			{store}
		}
		reverse_proxy {broken}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{store}", store, "{ok}", ok.Addr(), "{broken}", broken.Addr())
		sender := platforms.SenderOf("stripe")
		send := func(path, id, order, refund string, own, before, want int) {
			t.Helper()
			s, err := sender.Sign(keying.SendInput{Event: "charge.refunded", ID: id, Order: order, Amount: 12900, Refund: refund,
				RefundAmount: own, RefundedBefore: before, Now: time.Now(),
				Value: func(string, string, string) (string, error) { return secret, nil }})
			if err != nil {
				t.Fatal(err)
			}
			if r := gatewaytest.Post(t, g.Base+path, "application/json", string(s.Body), s.Header); r.Status != want {
				t.Fatalf("%s: %+v, want %d", id, r, want)
			}
		}
		send("/stripe", "evt_a1", "A", "a1", 3000, 0, 200)
		send("/stripe", "evt_a2", "A", "a2", 2000, 3000, 200)
		send("/stripe-failing", "evt_b2", "B", "b2", 2000, 3000, 502) // out of order
		send("/stripe-failing", "evt_b1", "B", "b1", 3000, 0, 502)
		own := map[string]string{"stripe:evt_a1": "30.00", "stripe:evt_a2": "20.00", "stripe_failing:evt_b1": "30.00", "stripe_failing:evt_b2": "20.00"}
		for charge, state := range map[string]string{"ch_A": "answered", "ch_B": "failed"} {
			var sv admin.SearchView
			g.AdminJSON(t, http.MethodGet, "/idempotency/search?q="+charge, &sv)
			if len(sv.Matches) != 2 {
				t.Errorf("search %s: %+v, want its two refunds", charge, sv.Matches)
			}
			for _, m := range sv.Matches {
				if want := own[m.Key]; m.Amount+" "+m.Currency != want+" USD" {
					t.Errorf("search %s: %s is %s %s, want %s USD", charge, m.Key, m.Amount, m.Currency, want)
				}
			}
			_, page := getPage(t, g.Base+"/console/search?q="+charge)
			list, err := gatewaytest.RunCLI(t, &bytes.Buffer{}, "list", "--state", state, "--address", g.Admin)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			for key, want := range own {
				if !strings.HasPrefix(key, map[string]string{"ch_A": "stripe:", "ch_B": "stripe_failing:"}[charge]) {
					continue
				}
				if !strings.Contains(rowOf(page, ">"+key+"<"), ">"+want+" USD<") {
					t.Errorf("console search %s: the row of %s lacks %s USD:\n%s", charge, key, want, rowOf(page, ">"+key+"<"))
				}
				var rv admin.RecordView
				g.AdminJSON(t, http.MethodGet, gatewaytest.KeyURI(key), &rv)
				if rv.Amount == nil || rv.Amount.Value != want || rv.Amount.Currency != "USD" || !rv.Amount.Refund {
					t.Errorf("key page of %s: %+v, want a refund of %s USD", key, rv.Amount, want)
				}
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` +` + state + ` +\S+ .* ` + regexp.QuoteMeta(want) + ` USD refund`).MatchString(list) {
					t.Errorf("list: no row of %s with %s USD:\n%s", key, want, list)
				}
			}
		}
		var s admin.SummaryView
		g.AdminJSON(t, http.MethodGet, "/idempotency/summary", &s)
		if s.Failed.Count != 2 || s.Failed.RefundAmounts["USD"] != "50.00" || len(s.Failed.Amounts) != 0 {
			t.Errorf("failed money at stake: %+v, want 50.00 USD of refunds owed", s.Failed)
		}
	})
}
