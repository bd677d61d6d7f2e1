package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
)

// WeChat Pay's service-provider (服务商) mode and the v2 refund's unsigned
// envelope, through the real module in front of backends that verify with
// wechatpay-go and gopay as a merchant's do.

const (
	partnerAPIv3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	partnerV2Key = "192006250b4c09247ec02edce69f6a2d"
)

// sdkRoute starts a gateway whose route at /notify has the idempotency
// lines route and proxies to be.
func sdkRoute(t *testing.T, route string, be *sdkbackend.Backend) gateway {
	t.Helper()
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)
	return startGateway(t, "\n\thandle /notify {\n\t\tidempotency {\n\t\t\t"+route+"\n\t\t\tstore memory\n\t\t}\n\t\treverse_proxy "+
		strings.TrimPrefix(srv.URL, "http://")+"\n\t}")
}

// sendCopies sends the copies that next signs (each a retry, signed anew):
// the first must run, the others be replayed, all answered 2xx.
func sendCopies(t *testing.T, g gateway, n int, next func() delivery) {
	t.Helper()
	for i := range n {
		d := next()
		d.path = "/notify"
		r := send(t, g.base, "", d)
		if r.status/100 != 2 || r.replayed != (i > 0) {
			t.Fatalf("copy %d: %d replayed=%v %q; want 2xx, replayed from the second copy on", i, r.status, r.replayed, r.body)
		}
	}
}

// hasKey says whether the gateway holds key.
func hasKey(t *testing.T, g gateway, key string) bool {
	t.Helper()
	status, _ := g.adminDo(t, http.MethodGet, keyURI(key))
	return status == http.StatusOK
}

// onceEach checks that the SDK accepted each event exactly once, and
// nothing else.
func onceEach(t *testing.T, be *sdkbackend.Backend, events ...string) {
	t.Helper()
	for _, e := range events {
		if be.Runs(e) != 1 {
			t.Fatalf("the SDK ran %v, refused %v; want %v once each", be.Events(), be.Refusals(), events)
		}
	}
	if be.Total() != len(events) || len(be.Refusals()) != 0 {
		t.Fatalf("the SDK ran %v (%d in all), refused %v; want %v once each", be.Events(), be.Total(), be.Refusals(), events)
	}
}

// TestWechatPayPartnerSDK: a service provider's v3 payment and refund
// (sp_mchid/sub_mchid instead of mchid) through a wechatpay route, pinned to
// the service provider, in front of wechatpay-go's notify handler: each runs
// once, its retries are replayed, and its key is the sub-merchant's order.
// Before partner mode, each was a 400 on every one of WeChat Pay's retries.
func TestWechatPayPartnerSDK(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pubFile := platformtest.WriteFile(t, "platform_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := sdkbackend.WechatPayPublicKey(partnerAPIv3, "PUB_KEY_ID_01", &k.PublicKey)
	g := sdkRoute(t, "platform wechatpay\n\t\t\tpublic_key "+pubFile+"\n\t\t\tpublic_key_id PUB_KEY_ID_01\n\t\t\tsecret "+partnerAPIv3+
		"\n\t\t\tmchid "+platformtest.WechatPaySpMchID, be)
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: partnerAPIv3}
	const sp, sub, tx = platformtest.WechatPaySpMchID, platformtest.WechatPaySubMchID, "4200000985202603146728590001"
	signed := func(id, eventType, resource string) func() delivery {
		return func() delivery {
			body, h := wx.Notification(t, platformtest.WechatPayEvent{ID: id, EventType: eventType, Resource: resource})
			return delivery{ctype: "application/json", body: string(body), header: h}
		}
	}
	sendCopies(t, g, 3, signed("EV-pay", "TRANSACTION.SUCCESS", platformtest.WechatPayPartnerTransaction(sp, sub, tx, "P1", "SUCCESS", 990)))
	sendCopies(t, g, 3, signed("EV-refund", "REFUND.SUCCESS", platformtest.WechatPayPartnerRefund(sp, sub, tx, "P1", "5030P1", "SUCCESS", 990, 990)))
	onceEach(t, be, tx+":paid", "refund:RP1:SUCCESS")
	for _, key := range []string{"wechatpay:" + sub + ":" + tx + ":paid", "wechatpay:" + sub + ":" + tx + ":refund:RP1"} {
		if !hasKey(t, g, key) {
			t.Errorf("no key %s: the order is the sub-merchant's", key)
		}
	}
}

// TestWechatPayV2PartnerSDK: a service provider's v2 payment (sub_mch_id,
// signed) and its refund through a wechatpay_v2 route pinned to the
// sub-merchant, in front of gopay: each runs once, retries are replayed,
// and the payment and the refund are one order, the sub-merchant's.
func TestWechatPayV2PartnerSDK(t *testing.T) {
	be := sdkbackend.WechatPayV2(partnerV2Key)
	const sub, tx = platformtest.WechatPayV2SubMchID, "4200000985202603146728590002"
	g := sdkRoute(t, "platform wechatpay_v2\n\t\t\tsecret "+partnerV2Key+"\n\t\t\tmchid "+sub, be)
	v2 := platformtest.WechatPayV2{APIKey: partnerV2Key}
	sendCopies(t, g, 3, func() delivery {
		return delivery{ctype: "text/xml", body: string(v2.Body(platformtest.WechatPayV2PartnerPayment(sub, tx, "P2", 990)))}
	})
	sendCopies(t, g, 3, func() delivery {
		return delivery{ctype: "text/xml", body: string(v2.PartnerRefund(t, sub, platformtest.WechatPayV2RefundInfo(tx, "P2", "5030P2", "SUCCESS", 990, 990)))}
	})
	onceEach(t, be, tx+":paid", "refund:RP2:SUCCESS")
	for _, key := range []string{"wechatpay_v2:" + sub + ":" + tx + ":paid", "wechatpay_v2:" + sub + ":" + tx + ":refund:RP2"} {
		if !hasKey(t, g, key) {
			t.Errorf("no key %s: the order is the sub-merchant's, the payment's and its refund's", key)
		}
	}
}

// TestWechatPayV2RefundEnvelopeReplay: a v2 refund notification
// authenticates only req_info. The same req_info under envelopes naming
// other merchants is one refund: gopay runs it once; an envelope that still
// names the route's merchant is replayed, one that does not is refused
// (403 merchant not accepted) and never forwarded. A verifying route without exactly one mchid,
// where the key's merchant could only come from the unsigned envelope (a
// second key, the refund run twice), does not start.
func TestWechatPayV2RefundEnvelopeReplay(t *testing.T) {
	t.Run("needs one mchid", func(t *testing.T) {
		for _, pins := range []string{"", "\n\t\tmchid 10000100 1900000109"} {
			cf := fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\tidempotency {\n\t\tplatform wechatpay_v2\n\t\tsecret %s%s\n\t\tstore memory\n\t}\n\trespond \"ok\"\n}\n",
				freePort(t), partnerV2Key, pins)
			cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
			if err != nil {
				t.Fatalf("adapting: %v", err)
			}
			err = caddy.Load(cfgJSON, true)
			if err == nil {
				caddy.Stop()
				t.Fatalf("a verifying wechatpay_v2 route with mchid %q started: its refunds' keys would name the unsigned envelope's mch_id", pins)
			}
			if !strings.Contains(err.Error(), "exactly one mchid") {
				t.Fatalf("start-up error %q should name the fix (exactly one mchid)", err)
			}
		}
	})
	t.Run("one refund", func(t *testing.T) {
		be := sdkbackend.WechatPayV2(partnerV2Key)
		const mch, tx = "10000100", "4200000985202603146728590003"
		g := sdkRoute(t, "platform wechatpay_v2\n\t\t\tsecret "+partnerV2Key+"\n\t\t\tmchid "+mch, be)
		v2 := platformtest.WechatPayV2{APIKey: partnerV2Key}
		genuine := v2.RefundInfoFields(t, platformtest.WechatPayV2RefundInfo(tx, "P3", "5030P3", "SUCCESS", 990, 990), "nonce1")
		envelope := func(kv ...string) delivery {
			f := map[string]string{}
			for k, v := range genuine {
				f[k] = v
			}
			for i := 0; i+1 < len(kv); i += 2 {
				f[kv[i]] = kv[i+1]
			}
			return delivery{path: "/notify", ctype: "text/xml", body: string(platformtest.WechatPayV2XML(f))}
		}
		if r := send(t, g.base, "", envelope()); r.status != 200 || r.replayed {
			t.Fatalf("genuine refund: %d replayed=%v %q", r.status, r.replayed, r.body)
		}
		// Another mch_id: not the route's merchant, refused before the backend.
		if r := send(t, g.base, "", envelope("mch_id", "1900000999", "appid", "wx0000000000000000")); r.status != http.StatusForbidden || r.body != "403 merchant not accepted\n" {
			t.Fatalf("req_info under another mch_id: %d %q; want 403 merchant not accepted", r.status, r.body)
		}
		// Another sub_mch_id and appid beside the route's mch_id: the same
		// refund, replayed.
		for _, d := range []delivery{envelope("sub_mch_id", "1900000999"), envelope("appid", "wx0000000000000000", "nonce_str", "nonce2")} {
			if r := send(t, g.base, "", d); r.status != 200 || !r.replayed || !strings.Contains(r.body, "SUCCESS") {
				t.Fatalf("req_info under another envelope: %d replayed=%v %q; want the refund's SUCCESS replayed", r.status, r.replayed, r.body)
			}
		}
		onceEach(t, be, "refund:RP3:SUCCESS")
		if be.Attempts() != 1 {
			t.Fatalf("the backend saw %d requests; want the genuine refund only", be.Attempts())
		}
		if !hasKey(t, g, "wechatpay_v2:"+mch+":"+tx+":refund:RP3") {
			t.Fatal("the refund's key names the route's mchid")
		}
	})
}

// TestWechatPayPartnerPinning: mchid pins a partner notification's
// sp_mchid or sub_mchid (v3) and mch_id or sub_mch_id (v2): a route pinned
// to one sub-merchant takes its notifications and refuses (403 merchant
// not accepted) another sub-merchant's of the same service provider,
// which never reaches the backend.
func TestWechatPayPartnerPinning(t *testing.T) {
	const sub, other = "1900000109", "1900000999"
	t.Run("v3", func(t *testing.T) {
		k, _ := platformtest.Keys(t)
		pubFile := platformtest.WriteFile(t, "platform_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
		be := sdkbackend.WechatPayPublicKey(partnerAPIv3, "PUB_KEY_ID_01", &k.PublicKey)
		g := sdkRoute(t, "platform wechatpay\n\t\t\tpublic_key "+pubFile+"\n\t\t\tpublic_key_id PUB_KEY_ID_01\n\t\t\tsecret "+partnerAPIv3+"\n\t\t\tmchid "+sub, be)
		wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: partnerAPIv3}
		paid := func(subMchID, tx string) delivery {
			body, h := wx.Notification(t, platformtest.WechatPayEvent{ID: "EV-" + tx, EventType: "TRANSACTION.SUCCESS",
				Resource: platformtest.WechatPayPartnerTransaction(platformtest.WechatPaySpMchID, subMchID, tx, "O"+tx, "SUCCESS", 100)})
			return delivery{path: "/notify", ctype: "application/json", body: string(body), header: h}
		}
		if r := send(t, g.base, "", paid(other, "4200000001")); r.status != http.StatusForbidden || r.body != "403 merchant not accepted\n" {
			t.Fatalf("another sub-merchant's payment: %d %q; want 403 merchant not accepted", r.status, r.body)
		}
		if be.Attempts() != 0 {
			t.Fatalf("the refused notification reached the backend (%d requests)", be.Attempts())
		}
		if r := send(t, g.base, "", paid(sub, "4200000002")); r.status/100 != 2 {
			t.Fatalf("the pinned sub-merchant's payment: %d %q", r.status, r.body)
		}
		onceEach(t, be, "4200000002:paid")
	})
	t.Run("v2", func(t *testing.T) {
		be := sdkbackend.WechatPayV2(partnerV2Key)
		g := sdkRoute(t, "platform wechatpay_v2\n\t\t\tsecret "+partnerV2Key+"\n\t\t\tmchid "+sub, be)
		v2 := platformtest.WechatPayV2{APIKey: partnerV2Key}
		paid := func(subMchID, tx string) delivery {
			return delivery{path: "/notify", ctype: "text/xml", body: string(v2.Body(platformtest.WechatPayV2PartnerPayment(subMchID, tx, "O"+tx, 100)))}
		}
		if r := send(t, g.base, "", paid(other, "4200000003")); r.status != http.StatusForbidden || r.body != "403 merchant not accepted\n" {
			t.Fatalf("another sub-merchant's payment: %d %q; want 403 merchant not accepted", r.status, r.body)
		}
		if be.Attempts() != 0 {
			t.Fatalf("the refused notification reached the backend (%d requests)", be.Attempts())
		}
		if r := send(t, g.base, "", paid(sub, "4200000004")); r.status/100 != 2 || !strings.Contains(r.body, "SUCCESS") {
			t.Fatalf("the pinned sub-merchant's payment: %d %q", r.status, r.body)
		}
		onceEach(t, be, "4200000004:paid")
	})
}
