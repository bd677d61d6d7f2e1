package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
	"github.com/idemgate/idemgate/reconcile"
)

// rcSeller is the seller_id of platformtest's Alipay notifications; its
// bill's #账号 is it + "0156".
const rcSeller = "2088102177296610"

func billOf(start func(io.Writer) billtest.Writer, rows ...billtest.Row) []byte {
	return billtest.Bytes(start, rows)
}

// TestReconcileRefusesAnotherMerchantsBill: a bill names its merchant; one
// of a merchant the scope neither pins nor has seen is refused with 400
// naming both, never reconciled — a WeChat Pay bill of 1900000888 posted
// to a scope pinned to 1230000109 (or one that saw only 1230000109), an
// Alipay bill of another seller account than the notifications signed.
func TestReconcileRefusesAnotherMerchantsBill(t *testing.T) {
	ev := rcEvent{order: 1, amount: "10.00", notified: "10.00", at: rcDay.Add(time.Hour)}
	for _, c := range []struct {
		name, extra, says string
	}{
		{"pinned", "mchid " + rcWxMchID, "scope wechatpay pins 1230000109"},
		{"seen", "", "scope wechatpay has seen merchant 1230000109"},
	} {
		t.Run("wechatpay/"+c.name, func(t *testing.T) {
			p := rcPlatforms()[1]
			sc := &scenario{fate: map[string]string{}}
			repl := append([]string{"{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1h", "{extra}", c.extra}, p.setup(t)...)
			g := gatewaytest.StartGateway(t, p.route, repl...)
			if r := p.send(t, g.Base, rcLabel(ev), ev); r.Status != 200 {
				t.Fatalf("notify: %d %s", r.Status, r.Body)
			}
			other := p.row(ev)
			other.Merchant = "1900000888"
			other.Order = rcTxn(7) // its own transaction: nothing of it ran here
			status, body := postRaw(t, g, "/idempotency/reconcile?platform=wechatpay", billOf(func(w io.Writer) billtest.Writer { return p.bill(w, rcDay, rcDay) }, other))
			if status != 400 || !strings.Contains(body, "merchant 1900000888's") || !strings.Contains(body, c.says) || !strings.Contains(body, "not reconciled") {
				t.Errorf("another merchant's bill: %d %s", status, body)
			}
			// merchant= cannot turn the bill into the scope's merchant's.
			status, body = postRaw(t, g, "/idempotency/reconcile?platform=wechatpay&merchant="+rcWxMchID, billOf(func(w io.Writer) billtest.Writer { return p.bill(w, rcDay, rcDay) }, other))
			if status != 400 || !strings.Contains(body, "line 2: the row is merchant 1900000888's, and merchant=1230000109") {
				t.Errorf("merchant= over another merchant's rows: %d %s", status, body)
			}
			// The scope's own merchant's bill reconciles.
			rep := postBill(t, g, "platform=wechatpay", billOf(func(w io.Writer) billtest.Writer { return p.bill(w, rcDay, rcDay) }, p.row(ev)))
			if rep.Matched.Count != 1 || len(rep.Merchant) != 1 || rep.Merchant[0] != rcWxMchID {
				t.Errorf("its own bill: %+v", rep)
			}
		})
	}
	// A service provider's (服务商) route pins its own mchid; its bill names
	// it in 商户号 and the sub-merchant, whose orders the keys name, in
	// 特约商户号.
	t.Run("wechatpay/service provider", func(t *testing.T) {
		const sp, sub = "1900000109", "1900000888"
		k, _ := platformtest.Keys(t)
		wx := platformtest.WechatPay{Key: k, Serial: rcWxKeyID, APIv3Key: rcWxAPIv3Key}
		sc := &scenario{fate: map[string]string{}}
		g := gatewaytest.StartGateway(t, rcPlatforms()[1].route, "{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1h",
			"{extra}", "mchid "+sp, "{pub}", platformtest.WriteFile(t, "wx.pem", platformtest.PublicKeyPEM(t, &k.PublicKey)))
		res := fmt.Sprintf(`{"sp_mchid":%q,"sub_mchid":%q,"sp_appid":"wx8888888888888888","transaction_id":%q,"out_trade_no":"M1","trade_state":"SUCCESS","trade_type":"JSAPI","success_time":%q,"amount":{"total":1000,"payer_total":1000,"currency":"CNY","payer_currency":"CNY"}}`,
			sp, sub, rcTxn(1), ev.at.Format(time.RFC3339))
		body, h := wx.Notification(t, platformtest.WechatPayEvent{ID: "EV-sp-1", EventType: "TRANSACTION.SUCCESS", Resource: res})
		if r := gatewaytest.Post(t, g.Base+"/notify", "application/json", string(body), h); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		row := billtest.Row{Kind: billtest.Payment, Order: rcTxn(1), MerchantOrder: "M1", Merchant: sp, SubMerchant: sub, Amount: "10.00", Currency: "CNY", Time: ev.at}
		rep := postBill(t, g, "platform=wechatpay", billOf(wechatpaybill.NewWriter, row))
		if rep.Matched.Count != 1 || rep.SettledNeverRun.Count != 0 || len(rep.Merchant) != 1 || rep.Merchant[0] != sub {
			t.Errorf("the sub-merchant's bill: %+v", rep)
		}
		// Another sub-merchant of the same provider is pinned through it.
		row.SubMerchant, row.Order = "1900000999", rcTxn(2)
		if rep := postBill(t, g, "platform=wechatpay", billOf(wechatpaybill.NewWriter, row)); rep.SettledNeverRun.Count != 1 {
			t.Errorf("another sub-merchant of the provider: %+v", rep)
		}
	})
	t.Run("alipay/another seller account", func(t *testing.T) {
		p := rcPlatforms()[0]
		sc := &scenario{fate: map[string]string{}}
		repl := append([]string{"{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1h", "{extra}", ""}, p.setup(t)...)
		g := gatewaytest.StartGateway(t, p.route, repl...)
		if r := p.send(t, g.Base, rcLabel(ev), ev); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		status, body := postRaw(t, g, "/idempotency/reconcile?platform=alipay", billOf(func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, "20880211096256330156", rcDay, rcDay.Add(24*time.Hour))
		}, p.row(ev)))
		if status != 400 || !strings.Contains(body, "seller account 20880211096256330156's") || !strings.Contains(body, "seller account "+rcSeller+"0156") {
			t.Errorf("another seller's bill: %d %s", status, body)
		}
	})
}

// TestReconcileAlipayAppFromRecords: an Alipay bill names the seller
// account, not the app_id of the keys; with no app_id pinned the gateway
// tells the app from what it recorded — the one app_id, or the app whose
// notifications signed the bill's seller_id — and asks for merchant=
// only when that is ambiguous.
func TestReconcileAlipayAppFromRecords(t *testing.T) {
	k, _ := platformtest.Keys(t)
	signer := platformtest.Alipay{Key: k}
	sc := &scenario{fate: map[string]string{}}
	route := strings.Replace(rcPlatforms()[0].route, "app_id "+rcAlipayApp, "", 1)
	g := gatewaytest.StartGateway(t, route, "{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1h", "{extra}", "",
		"{pub}", platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey)))
	send := func(app, seller string, order int) billtest.Row {
		t.Helper()
		at := rcDay.Add(time.Duration(order) * time.Minute)
		p := platformtest.AlipayNotify(app, fmt.Sprintf("M%d", order), rcTrade(order), "TRADE_SUCCESS", "10.00")
		p.Set("seller_id", seller)
		p.Set("gmt_payment", at.Format(time.DateTime))
		if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded; charset=utf-8", signer.Body(t, p), nil); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		return billtest.Row{Kind: billtest.Payment, Order: rcTrade(order), MerchantOrder: fmt.Sprintf("M%d", order), Amount: "10.00", Currency: "CNY", Time: at}
	}
	billFor := func(account string, rows ...billtest.Row) []byte {
		return billOf(func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, account, rcDay, rcDay.Add(24*time.Hour))
		}, rows...)
	}
	const appB, appC, sellerB = "2021004000000002", "2021004000000003", "2088000000000002"
	rowA := send(rcAlipayApp, rcSeller, 1)

	// One app recorded: no merchant= needed.
	rep := postBill(t, g, "platform=alipay", billFor(rcSeller+"0156", rowA))
	if rep.Matched.Count != 1 || len(rep.Merchant) != 1 || rep.Merchant[0] != rcAlipayApp || !strings.Contains(strings.Join(rep.Notes, "\n"), "app_id "+rcAlipayApp+": ") {
		t.Fatalf("one app recorded: %+v", rep)
	}
	// Two apps of two sellers: the bill's account picks the one whose
	// notifications signed that seller_id.
	rowB := send(appB, sellerB, 2)
	for _, c := range []struct {
		account, app string
		row          billtest.Row
	}{{rcSeller + "0156", rcAlipayApp, rowA}, {sellerB + "0156", appB, rowB}} {
		rep := postBill(t, g, "platform=alipay", billFor(c.account, c.row))
		if rep.Matched.Count != 1 || rep.SettledNeverRun.Count != 0 || rep.Merchant[0] != c.app ||
			!strings.Contains(strings.Join(rep.Notes, "\n"), "whose notifications name the bill's seller account "+c.account) {
			t.Errorf("bill of %s: %+v, want app %s", c.account, rep, c.app)
		}
	}
	// Two apps of one seller: ambiguous — say which.
	rowC := send(appC, rcSeller, 3)
	status, body := postRaw(t, g, "/idempotency/reconcile?platform=alipay", billFor(rcSeller+"0156", rowA, rowC))
	if status != 400 || !strings.Contains(body, appC+", "+rcAlipayApp) || !strings.Contains(body, "say which with merchant=<app_id>") {
		t.Errorf("two apps of one seller: %d %s", status, body)
	}
	rep = postBill(t, g, "platform=alipay&merchant="+appC, billFor(rcSeller+"0156", rowC))
	if rep.Matched.Count != 1 || rep.Merchant[0] != appC {
		t.Errorf("merchant=%s: %+v", appC, rep)
	}
	// merchant= of an app the scope has never seen.
	status, body = postRaw(t, g, "/idempotency/reconcile?platform=alipay&merchant=2021009999999999", billFor(rcSeller+"0156", rowA))
	if status != 400 || !strings.Contains(body, "merchant=2021009999999999 names an app_id, and scope alipay has seen merchant "+appB+", "+appC+", "+rcAlipayApp+" and has recorded nothing of 2021009999999999") {
		t.Errorf("merchant= of an app never seen: %d %s", status, body)
	}
	// merchant= of an app whose notifications name another seller.
	status, body = postRaw(t, g, "/idempotency/reconcile?platform=alipay&merchant="+appB, billFor(rcSeller+"0156", rowA))
	if status != 400 || !strings.Contains(body, "app_id "+appB+"'s notifications name seller account "+sellerB+"0156") {
		t.Errorf("merchant= of another seller's app: %d %s", status, body)
	}
}

// TestReconcileAlipayAppFromOrders: past the records' ttl nothing
// recorded tells an Alipay bill's app (the route pins none); the orders,
// kept for order_ttl, do: the bill's rows name them by out_trade_no, and
// it is reconciled, not refused.
func TestReconcileAlipayAppFromOrders(t *testing.T) {
	k, _ := platformtest.Keys(t)
	signer := platformtest.Alipay{Key: k}
	sc := &scenario{fate: map[string]string{}}
	route := strings.Replace(rcPlatforms()[0].route, "app_id "+rcAlipayApp, "", 1)
	g := gatewaytest.StartGateway(t, route, "{store}", "store memory", "{backend}", rcBackend(t, sc).Addr(), "{ttl}", "1s", "{extra}", "",
		"{pub}", platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey)))
	var rows []billtest.Row
	for order := 1; order <= 2; order++ {
		at := rcDay.Add(time.Duration(order) * time.Minute)
		p := platformtest.AlipayNotify(rcAlipayApp, fmt.Sprintf("M%d", order), rcTrade(order), "TRADE_SUCCESS", "10.00")
		p.Set("seller_id", rcSeller)
		p.Set("gmt_payment", at.Format(time.DateTime))
		if r := gatewaytest.Post(t, g.Base+"/notify", "application/x-www-form-urlencoded; charset=utf-8", signer.Body(t, p), nil); r.Status != 200 {
			t.Fatalf("notify: %d %s", r.Status, r.Body)
		}
		rows = append(rows, billtest.Row{Kind: billtest.Payment, Order: rcTrade(order), MerchantOrder: fmt.Sprintf("M%d", order), Amount: "10.00", Currency: "CNY", Time: at})
	}
	gatewaytest.Eventually(t, 20*time.Second, "the records to expire", func() bool {
		return gatewaytest.Record(t, "alipay:"+rcAlipayApp+":"+rcTrade(1)+":paid") == nil && gatewaytest.Record(t, "alipay:"+rcAlipayApp+":"+rcTrade(2)+":paid") == nil
	})
	bill := billOf(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, rcSeller+"0156", rcDay, rcDay.Add(24*time.Hour))
	}, rows...)
	status, body := postRaw(t, g, "/idempotency/reconcile?platform=alipay&items=1", bill)
	var rep reconcile.Report
	if status != 200 || json.Unmarshal([]byte(body), &rep) != nil {
		t.Fatalf("a bill past the records' ttl: %d %s", status, body)
	}
	if rep.Matched.Count != 2 || rep.SettledNeverRun.Count != 0 || len(rep.Merchant) != 1 || rep.Merchant[0] != rcAlipayApp ||
		!strings.Contains(strings.Join(rep.Notes, "\n"), "app_id "+rcAlipayApp+": the app_id of the orders the bill's rows name") {
		t.Errorf("a bill past the records' ttl: %+v", rep)
	}
	for _, it := range rep.Matched.Items {
		if it.State != "ran" {
			t.Errorf("%s: state %q, want ran (its record's ttl passed)", it.Key, it.State)
		}
	}
}
