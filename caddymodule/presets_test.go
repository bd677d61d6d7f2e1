package caddymodule

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/logging"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// End-to-end tests of the platform presets through the real module: every
// notification is signed as the platform signs it (internal/platformtest),
// sent over loopback to an in-process Caddy, and counted at a stand-in
// backend.

// Test secrets; they sign nothing real.
const (
	testAlipayAppID  = "2016091800538339"
	testWxAPIv3Key   = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4" // 32 bytes
	testWxPubKeyID   = "PUB_KEY_ID_0114232134912410000000000000"
	testWxV2Key      = "192006250b4c09247ec02edce69f6a2d"
	testStripeSecret = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
	testSWSecret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	testPayPalHookID = "1JE4291016473214C"
)

// delivery is one signed copy of a notification, as the platform sends it.
type delivery struct {
	method string // default POST
	path   string // set by the test from the route
	query  string // GET: the signed query
	ctype  string
	body   string
	header http.Header
}

// noRedirects shows a redirect instead of following it
// (gatewaytest.NoRedirects).
var noRedirects = gatewaytest.NoRedirects

// send delivers d to base (gatewaytest.Send); X-Order tells the counting
// backend which order it is (the gateway ignores it: preset keys come from
// signed content).
func send(t testing.TB, base, order string, d delivery) reply {
	t.Helper()
	return replyOf(gatewaytest.Send(t, base, order, d.of()))
}

func (d delivery) of() gatewaytest.Delivery {
	return gatewaytest.Delivery{Method: d.method, Path: d.path, Query: d.query, Ctype: d.ctype, Body: d.body, Header: d.header}
}

func deliveryOf(d gatewaytest.Delivery) delivery {
	return delivery{method: d.Method, path: d.Path, query: d.Query, ctype: d.Ctype, body: d.Body, header: d.Header}
}

// answer is what the backend says.
type answer struct {
	status int
	body   string
}

// preset describes one platform for the contract test.
type preset struct {
	name string
	// route is the idempotency block's platform lines (platform, secrets).
	route string
	// sign returns a freshly signed delivery of one event of an order:
	// event 0 and event 1 are distinct events (new trade status, refund)
	// with distinct keys. Each call re-signs, as the platform's retry does.
	sign func(t testing.TB, order string, event int) delivery
	// forgeries are deliveries that must be refused with 401.
	forgeries map[string]func(t testing.TB, order string) delivery
	// ok is the backend's "handled" answer by the platform's rule; fails
	// are answers that are not, so the key must be released.
	ok    answer
	fails []answer
}

func presets(t testing.TB) []preset {
	k, other := platformtest.Keys(t)
	// signedAt is the time of each genuine copy: every call is a second
	// later, as a retry is signed later than the copy before it (starting
	// two minutes back, so all stay inside the 5-minute tolerance).
	var mu sync.Mutex
	copies := 0
	signedAt := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		copies++
		return time.Now().Add(-2*time.Minute + time.Duration(copies)*time.Second)
	}
	pubFile := platformtest.WriteFile(t, "platform_public_key.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	serial := big.NewInt(0x5157F09EFDC096DE)
	certFile := platformtest.WriteFile(t, "platform_cert.pem", platformtest.Certificate(t, k, serial, "platform"))

	// Alipay: the notify POST.
	alipay := platformtest.Alipay{Key: k}
	alipayParams := func(order string, event int) url.Values {
		p := platformtest.AlipayNotify(testAlipayAppID, order, "2026"+order, "TRADE_SUCCESS", "88.88")
		if event == 1 {
			// Another business event of the order: a partial refund.
			p.Set("out_biz_no", "RF-"+order)
			p.Set("refund_fee", "8.88")
		}
		p.Set("notify_time", signedAt().In(time.FixedZone("CST", 8*3600)).Format(time.DateTime)) // a retry's is later
		return p
	}
	alipayForm := func(body string) delivery {
		return delivery{ctype: "application/x-www-form-urlencoded; charset=utf-8", body: body}
	}
	alipayTampered := func(field, value string) func(testing.TB, string) delivery {
		return func(t testing.TB, order string) delivery {
			signed := alipay.Sign(t, alipayParams(order, 0))
			signed.Set(field, value)
			return alipayForm(signed.Encode())
		}
	}

	// WeChat Pay v3, with the platform public key or a certificate.
	wxEvent := func(order string, event int) platformtest.WechatPayEvent {
		tx := "4200" + order
		if event == 1 {
			return platformtest.WechatPayEvent{ID: "refund-note-" + order, EventType: "REFUND.SUCCESS", Summary: "退款成功",
				Resource: platformtest.WechatPayRefund(tx, order, "5030"+order, "SUCCESS", 990, 990)}
		}
		return platformtest.WechatPayEvent{ID: "pay-note-" + order, EventType: "TRANSACTION.SUCCESS",
			Resource: platformtest.WechatPayTransaction(tx, order, "SUCCESS", 990)}
	}
	wechat := func(s platformtest.WechatPay) (func(testing.TB, string, int) delivery, map[string]func(testing.TB, string) delivery) {
		sign := func(t testing.TB, order string, event int) delivery {
			body := s.Body(t, wxEvent(order, event)) // re-encrypted with a new nonce
			return delivery{body: string(body), header: s.Header(t, body, signedAt())}
		}
		forged := s
		forged.Key = other
		unknown := s
		unknown.Serial = "7132D72A03E93CDDF8C03BBD1F37EEDF"
		return sign, map[string]func(testing.TB, string) delivery{
			"tampered body": func(t testing.TB, order string) delivery {
				body, h := s.Notification(t, wxEvent(order, 0))
				return delivery{body: strings.Replace(string(body), `"summary":"支付成功"`, `"summary":"支付成功 "`, 1), header: h}
			},
			"wrong key": func(t testing.TB, order string) delivery {
				body, h := forged.Notification(t, wxEvent(order, 0))
				return delivery{body: string(body), header: h}
			},
			"unknown serial": func(t testing.TB, order string) delivery {
				body, h := unknown.Notification(t, wxEvent(order, 0))
				return delivery{body: string(body), header: h}
			},
			"stale timestamp": func(t testing.TB, order string) delivery {
				body := s.Body(t, wxEvent(order, 0))
				return delivery{body: string(body), header: s.Header(t, body, time.Now().Add(-6*time.Minute))}
			},
			"future timestamp": func(t testing.TB, order string) delivery {
				body := s.Body(t, wxEvent(order, 0))
				return delivery{body: string(body), header: s.Header(t, body, time.Now().Add(6*time.Minute))}
			},
			"WECHATPAY/SIGNTEST probe": func(t testing.TB, order string) delivery {
				body := s.Body(t, wxEvent(order, 0))
				return delivery{body: string(body), header: s.SigntestHeader(t, body)}
			},
		}
	}
	wxPubSign, wxPubForged := wechat(platformtest.WechatPay{Key: k, Serial: testWxPubKeyID, APIv3Key: testWxAPIv3Key})
	wxCertSign, wxCertForged := wechat(platformtest.WechatPay{Key: k, Serial: platformtest.SerialHex(serial), APIv3Key: testWxAPIv3Key})

	// WeChat Pay v2: a payment, then a refund.
	v2 := platformtest.WechatPayV2{APIKey: testWxV2Key}
	v2xml := func(body []byte) delivery { return delivery{ctype: "text/xml", body: string(body)} }
	v2Payment := func(order string) map[string]string { return platformtest.WechatPayV2Payment("4200"+order, order, 990) }

	// PayPal, with the signing certificate configured.
	paypal := platformtest.PayPal{Key: k, WebhookID: testPayPalHookID}
	ppEvent := func(order string, event int) []byte {
		typ := []string{"PAYMENT.CAPTURE.COMPLETED", "PAYMENT.CAPTURE.REFUNDED"}[event]
		return platformtest.PayPalEvent("WH-"+order+"-"+itoa(event), typ, "CAP"+order, "7.47")
	}
	ppSigned := func(p platformtest.PayPal, body []byte) delivery {
		return delivery{body: string(body), header: p.Header(t, body, signedAt())}
	}

	// Stripe and Standard Webhooks.
	stEvent := func(order string, event int) []byte {
		typ := []string{"payment_intent.succeeded", "charge.refunded"}[event]
		return platformtest.StripeEvent("evt_"+order+"_"+itoa(event), typ, "pi_"+order, 2000)
	}
	swBody := func(order string, event int) []byte {
		return []byte(`{"type":"invoice.paid","data":{"order":"` + order + `","event":` + itoa(event) + `}}`)
	}
	swID := func(order string, event int) string { return "msg_" + order + "_" + itoa(event) }

	serverError := answer{500, "internal error"}
	return []preset{
		{
			name:  "alipay",
			route: "platform alipay\n\t\tpublic_key " + pubFile,
			sign: func(t testing.TB, order string, event int) delivery {
				return alipayForm(alipay.Body(t, alipayParams(order, event)))
			},
			forgeries: map[string]func(testing.TB, string) delivery{
				"tampered total_amount": alipayTampered("total_amount", "0.01"),
				"tampered trade_status": alipayTampered("trade_status", "TRADE_CLOSED"),
				"added out_biz_no":      alipayTampered("out_biz_no", "X1"),
				"wrong key": func(t testing.TB, order string) delivery {
					return alipayForm(platformtest.Alipay{Key: other}.Body(t, alipayParams(order, 0)))
				},
				"no sign": func(t testing.TB, order string) delivery {
					return alipayForm(alipayParams(order, 0).Encode())
				},
			},
			ok:    answer{200, "success"},
			fails: []answer{{200, "fail"}, serverError},
		},
		{
			name:      "wechatpay public key",
			route:     "platform wechatpay\n\t\tpublic_key " + pubFile + "\n\t\tpublic_key_id " + testWxPubKeyID + "\n\t\tsecret " + testWxAPIv3Key,
			sign:      wxPubSign,
			forgeries: wxPubForged,
			ok:        answer{204, ""},
			fails:     []answer{serverError, {202, ""}},
		},
		{
			name:      "wechatpay certificate",
			route:     "platform wechatpay\n\t\tcertificate " + certFile + "\n\t\tsecret " + testWxAPIv3Key,
			sign:      wxCertSign,
			forgeries: wxCertForged,
			ok:        answer{200, ""},
			fails:     []answer{serverError},
		},
		{
			name:  "wechatpay_v2",
			route: "platform wechatpay_v2\n\t\tsecret " + testWxV2Key + "\n\t\tmchid 10000100",
			sign: func(t testing.TB, order string, event int) delivery {
				if event == 1 {
					return v2xml(v2.Refund(t, platformtest.WechatPayV2RefundInfo("4200"+order, order, "5030"+order, "SUCCESS", 990, 990)))
				}
				if order[len(order)-1]%2 == 0 { // both sign types
					return v2xml(platformtest.WechatPayV2{APIKey: testWxV2Key, SignType: "HMAC-SHA256"}.Body(v2Payment(order)))
				}
				return v2xml(v2.Body(v2Payment(order)))
			},
			forgeries: map[string]func(testing.TB, string) delivery{
				"tampered total_fee": func(t testing.TB, order string) delivery {
					f := v2.Sign(v2Payment(order))
					f["total_fee"] = "1"
					return v2xml(platformtest.WechatPayV2XML(f))
				},
				"wrong key": func(t testing.TB, order string) delivery {
					return v2xml(platformtest.WechatPayV2{APIKey: strings.Repeat("0", 32)}.Body(v2Payment(order)))
				},
				"no sign": func(t testing.TB, order string) delivery {
					return v2xml(platformtest.WechatPayV2XML(v2Payment(order)))
				},
				"refund under another key": func(t testing.TB, order string) delivery {
					return v2xml(platformtest.WechatPayV2{APIKey: strings.Repeat("0", 32)}.Refund(t,
						platformtest.WechatPayV2RefundInfo("4200"+order, order, "5030"+order, "SUCCESS", 990, 990)))
				},
			},
			ok: answer{200, platformtest.WechatPayV2Answer("SUCCESS", "OK")},
			fails: []answer{
				{200, platformtest.WechatPayV2Answer("FAIL", "database busy")},
				{500, platformtest.WechatPayV2Answer("SUCCESS", "OK")},
			},
		},
		{
			name:  "paypal",
			route: "platform paypal\n\t\twebhook_id " + testPayPalHookID + "\n\t\tcertificate " + certFile,
			sign: func(t testing.TB, order string, event int) delivery {
				return ppSigned(paypal, ppEvent(order, event))
			},
			forgeries: map[string]func(testing.TB, string) delivery{
				"tampered body": func(t testing.TB, order string) delivery {
					d := ppSigned(paypal, ppEvent(order, 0))
					d.body = strings.Replace(d.body, `"value":"7.47"`, `"value":"0.01"`, 1)
					return d
				},
				"wrong key": func(t testing.TB, order string) delivery {
					return ppSigned(platformtest.PayPal{Key: other, WebhookID: testPayPalHookID}, ppEvent(order, 0))
				},
				"another webhook's": func(t testing.TB, order string) delivery {
					return ppSigned(platformtest.PayPal{Key: k, WebhookID: "8PT597110X687430LKGECATA"}, ppEvent(order, 0))
				},
			},
			ok:    answer{200, ""},
			fails: []answer{serverError, {404, "no such route"}},
		},
		{
			name:  "stripe",
			route: "platform stripe\n\t\tsecret {env.IDEMGATE_TEST_STRIPE_SECRET}",
			sign: func(t testing.TB, order string, event int) delivery {
				body := stEvent(order, event)
				return delivery{body: string(body), header: platformtest.StripeHeader(body, testStripeSecret, signedAt())}
			},
			forgeries: map[string]func(testing.TB, string) delivery{
				"tampered body": func(t testing.TB, order string) delivery {
					body := stEvent(order, 0)
					return delivery{body: strings.Replace(string(body), `"amount": 2000`, `"amount": 1`, 1),
						header: platformtest.StripeHeader(body, testStripeSecret, time.Now())}
				},
				"wrong secret": func(t testing.TB, order string) delivery {
					body := stEvent(order, 0)
					return delivery{body: string(body), header: platformtest.StripeHeader(body, "whsec_other", time.Now())}
				},
				"stale timestamp": func(t testing.TB, order string) delivery {
					body := stEvent(order, 0)
					return delivery{body: string(body), header: platformtest.StripeHeader(body, testStripeSecret, time.Now().Add(-6*time.Minute))}
				},
			},
			ok:    answer{200, `{"received":true}`},
			fails: []answer{serverError, {400, "bad event"}},
		},
		{
			name:  "standard_webhooks",
			route: "platform standard_webhooks\n\t\tsecret " + testSWSecret,
			sign: func(t testing.TB, order string, event int) delivery {
				body := swBody(order, event)
				return delivery{body: string(body), header: platformtest.StandardWebhooksHeader(t, testSWSecret, swID(order, event), signedAt(), body)}
			},
			forgeries: map[string]func(testing.TB, string) delivery{
				"tampered body": func(t testing.TB, order string) delivery {
					body := swBody(order, 0)
					return delivery{body: strings.Replace(string(body), "invoice.paid", "invoice.voided", 1),
						header: platformtest.StandardWebhooksHeader(t, testSWSecret, swID(order, 0), time.Now(), body)}
				},
				"wrong secret": func(t testing.TB, order string) delivery {
					body := swBody(order, 0)
					return delivery{body: string(body), header: platformtest.StandardWebhooksHeader(t, "whsec_b3RoZXIgc2VjcmV0", swID(order, 0), time.Now(), body)}
				},
				"stale timestamp": func(t testing.TB, order string) delivery {
					body := swBody(order, 0)
					return delivery{body: string(body), header: platformtest.StandardWebhooksHeader(t, testSWSecret, swID(order, 0), time.Now().Add(-6*time.Minute), body)}
				},
				"another message's id": func(t testing.TB, order string) delivery {
					body := swBody(order, 0)
					h := platformtest.StandardWebhooksHeader(t, testSWSecret, swID(order, 0), time.Now(), body)
					h.Set("Webhook-Id", swID(order, 1))
					return delivery{body: string(body), header: h}
				},
			},
			ok:    answer{200, ""},
			fails: []answer{serverError},
		},
	}
}

// TestPresetContract runs every preset through the contract's answer table:
// forgeries are refused and claim nothing, the genuine copy is forwarded
// once, re-signed retries get the replay, a new event is forwarded, and a
// backend answer that is not the platform's success is not remembered.
func TestPresetContract(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_STRIPE_SECRET", testStripeSecret)
	ps := presets(t)
	backends := make([]*backend, len(ps))
	var site strings.Builder
	for i, p := range ps {
		be := newBackend(t)
		backends[i] = be
		site.WriteString(`
	handle /hook/` + itoa(i) + ` {
		idempotency {
		` + p.route + `
			store memory
		}
		reverse_proxy ` + be.addr() + `
	}`)
	}
	base := startCaddy(t, site.String())

	for i, p := range ps {
		t.Run(p.name, func(t *testing.T) {
			be := backends[i]
			path := "/hook/" + itoa(i)
			// Orders named fail<j>… answer fails[j] on their first hit.
			be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
				var j int
				if _, err := fmt.Sscanf(order, "fail%d-", &j); err == nil && n == 1 && j < len(p.fails) {
					return p.fails[j].status, p.fails[j].body, 0
				}
				return p.ok.status, p.ok.body, 0
			})
			deliver := func(order string, d delivery) reply {
				t.Helper()
				d.path = path
				return send(t, base, order, d)
			}
			order := "o" + itoa(i) + "x7"

			// Forgeries first: none reaches the backend, none claims the key.
			for name, forge := range p.forgeries {
				if r := deliver(order, forge(t, order)); r.status != http.StatusUnauthorized {
					t.Errorf("%s: got %d %q, want 401", name, r.status, r.body)
				}
			}
			if n := be.count(order); n != 0 {
				t.Fatalf("forgeries reached the backend %d times", n)
			}

			// The genuine notification is forwarded; re-signed retries are replayed.
			first := deliver(order, p.sign(t, order, 0))
			if first.status != p.ok.status || first.body != p.ok.body || first.replayed {
				t.Fatalf("genuine copy after the forgeries: got %d %q replayed=%v, want the backend's %d %q",
					first.status, first.body, first.replayed, p.ok.status, p.ok.body)
			}
			for retry := range 3 {
				r := deliver(order, p.sign(t, order, 0))
				if !r.replayed || r.status != first.status || r.body != first.body {
					t.Fatalf("re-signed retry %d: got %d %q replayed=%v, want the replayed %d %q",
						retry, r.status, r.body, r.replayed, first.status, first.body)
				}
			}
			// A forgery of an answered key is still a 401, not a replay.
			for name, forge := range p.forgeries {
				if r := deliver(order, forge(t, order)); r.status != http.StatusUnauthorized || r.replayed {
					t.Errorf("%s after the answer: got %d replayed=%v, want 401", name, r.status, r.replayed)
				}
			}
			if n := be.count(order); n != 1 {
				t.Fatalf("backend ran %d times for one notification and its retries, want 1", n)
			}

			// A new event of the same order is its own notification.
			if r := deliver(order, p.sign(t, order, 1)); r.status != p.ok.status || r.replayed {
				t.Fatalf("new event: got %d %q replayed=%v, want it forwarded", r.status, r.body, r.replayed)
			}
			if r := deliver(order, p.sign(t, order, 1)); !r.replayed {
				t.Fatalf("retry of the new event: got %d replayed=%v, want the replay", r.status, r.replayed)
			}
			if n := be.count(order); n != 2 {
				t.Fatalf("backend ran %d times for two events, want 2", n)
			}

			// An answer that is not the platform's success is not remembered.
			for j, fail := range p.fails {
				order := "fail" + itoa(j) + "-" + itoa(i) + "x" + itoa(j)
				r := deliver(order, p.sign(t, order, 0))
				if r.status != fail.status || r.body != fail.body || r.replayed {
					t.Fatalf("failure %d: got %d %q replayed=%v, want the backend's %d %q", j, r.status, r.body, r.replayed, fail.status, fail.body)
				}
				if r := deliver(order, p.sign(t, order, 0)); r.replayed || r.status != p.ok.status || r.body != p.ok.body {
					t.Fatalf("retry after failure %d (%d %q): got %d %q replayed=%v, want it forwarded", j, fail.status, fail.body, r.status, r.body, r.replayed)
				}
				if r := deliver(order, p.sign(t, order, 0)); !r.replayed {
					t.Fatalf("copy after the successful retry: got %d replayed=%v, want the replay", r.status, r.replayed)
				}
				if n := be.count(order); n != 2 {
					t.Fatalf("failure %d: backend ran %d times, want 2 (the failure and the retry)", j, n)
				}
			}
		})
	}
}

// startCaddyLogged is startCaddy with Caddy's logs written as JSON to a
// file at level, for tests of what the module logs at start.
func startCaddyLogged(t testing.TB, level, siteBody string) (base, logFile string) {
	t.Helper()
	logFile = filepath.Join(t.TempDir(), "caddy.log")
	g := caddyGlobals{log: fmt.Sprintf("output file %s\n\t\tformat json\n\t\tlevel %s", logFile, level)}
	return startCaddyWith(t, g, strings.Trim(siteBody, "\n")), logFile
}

// logLines returns the JSON log lines of file whose msg contains substr.
func logLines(t testing.TB, file, substr string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(string(data), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, substr) {
			out = append(out, m)
		}
	}
	return out
}

// TestPresetVerifyOff: with `verify off` every preset starts without its
// secret, says so in the log, and still deduplicates unsigned notifications
// by its default key.
func TestPresetVerifyOff(t *testing.T) {
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		switch r.URL.Path {
		case "/alipay":
			return 200, "success", 0
		case "/wechatpay_v2":
			return 200, platformtest.WechatPayV2Answer("SUCCESS", "OK"), 0
		}
		return 200, "ok", 0
	})
	names := []string{"alipay", "wechatpay", "wechatpay_v2", "stripe", "paypal", "standard_webhooks"}
	var site strings.Builder
	for _, name := range names {
		site.WriteString(`
	handle /` + name + ` {
		idempotency {
			platform ` + name + `
			verify off
			store memory
		}
		reverse_proxy ` + be.addr() + `
	}`)
	}
	base, logFile := startCaddyLogged(t, "WARN", site.String())

	unsigned := map[string]delivery{
		"alipay": {ctype: "application/x-www-form-urlencoded",
			body: platformtest.AlipayNotify(testAlipayAppID, "vo-alipay", "2026vo", "TRADE_SUCCESS", "1.00").Encode()},
		"wechatpay":    {ctype: "application/json", body: `{"id":"vo-note-1","event_type":"TRANSACTION.SUCCESS","resource":{}}`},
		"wechatpay_v2": {ctype: "text/xml", body: string(platformtest.WechatPayV2XML(platformtest.WechatPayV2Payment("4200vo", "vo", 1)))},
		"stripe":       {ctype: "application/json", body: string(platformtest.StripeEvent("evt_vo", "payment_intent.succeeded", "pi_vo", 100))},
		"paypal":       {ctype: "application/json", body: string(platformtest.PayPalEvent("WH-vo", "PAYMENT.CAPTURE.COMPLETED", "CAPvo", "1.00"))},
		"standard_webhooks": {ctype: "application/json", body: `{"type":"invoice.paid"}`,
			header: http.Header{"Webhook-Id": {"msg_vo"}}},
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			d := unsigned[name]
			d.path = "/" + name
			order := "vo-" + name
			if r := send(t, base, order, d); r.status != 200 || r.replayed {
				t.Fatalf("first unsigned copy: got %d %q replayed=%v, want it forwarded", r.status, r.body, r.replayed)
			}
			if r := send(t, base, order, d); r.status != 200 || !r.replayed {
				t.Fatalf("second copy: got %d %q replayed=%v, want the replay", r.status, r.body, r.replayed)
			}
			if n := be.count(order); n != 1 {
				t.Fatalf("backend ran %d times, want 1", n)
			}
		})
	}
	if got := len(logLines(t, logFile, "signature verification is OFF")); got != len(names) {
		t.Errorf("%d warnings about verify off in the log, want %d", got, len(names))
	}
}

// TestPresetNeedsItsSecret: a preset without its secret or key refuses to
// start, and the error says what to configure.
func TestPresetNeedsItsSecret(t *testing.T) {
	for name, want := range map[string]string{
		"alipay":            "public_key",
		"wechatpay":         "public_key",
		"wechatpay_v2":      "secret",
		"stripe":            "secret",
		"paypal":            "webhook_id",
		"standard_webhooks": "secret",
	} {
		t.Run(name, func(t *testing.T) {
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
		platform %s
		store memory
	}
	respond "unreachable"
}
`, freePort(t), name)
			cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
			if err != nil {
				t.Fatalf("adapting: %v", err)
			}
			err = caddy.Load(cfgJSON, true)
			if err == nil {
				caddy.Stop()
				t.Fatalf("platform %s started without its secret", name)
			}
			if !strings.Contains(err.Error(), "needs its secret") || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q should say the preset needs its secret and name %s", err, want)
			}
		})
	}
}

// TestPresetTTLShorterThanRetryWindow: a ttl shorter than the platform's
// retry window starts, with a warning in the log; the default ttl does not
// warn.
func TestPresetTTLShorterThanRetryWindow(t *testing.T) {
	_, logFile := startCaddyLogged(t, "WARN", `
	handle /short {
		idempotency {
			platform stripe
			secret `+testStripeSecret+`
			ttl 24h
			store memory
		}
		respond "ok"
	}
	handle /default {
		idempotency {
			platform wechatpay_v2
			secret `+testWxV2Key+`
			mchid 10000100
			store memory
		}
		respond "ok"
	}`)
	lines := logLines(t, logFile, "ttl is shorter than the platform's retry window")
	if len(lines) != 1 {
		t.Fatalf("%d warnings about ttl, want 1 (stripe's ttl 24h): %v", len(lines), lines)
	}
	if lines[0]["platform"] != "stripe" || lines[0]["level"] != "warn" {
		t.Errorf("warning %v should be at warn level and name platform stripe", lines[0])
	}
}

// twoChannelSite is the design's "two channels, one order" for Alipay: the
// browser's return (GET) and the server's notify (POST) share one key per
// order, so whichever arrives first is forwarded and the other never is.
const twoChannelSite = `
	handle /alipay/notify {
		idempotency {
			platform alipay
			public_key {pub}
			key alipay:{idempotency.form.app_id}:{idempotency.form.out_trade_no}:{idempotency.event}
			store memory
			on_duplicate respond 200 success
		}
		reverse_proxy {backend}
	}
	handle /alipay/return {
		idempotency {
			platform alipay
			public_key {pub}
			key alipay:{idempotency.form.app_id}:{idempotency.form.out_trade_no}:{idempotency.event}
			return business
			store memory
			success 302
			on_duplicate redirect https://shop.example.com/orders/{idempotency.form.out_trade_no}
		}
		reverse_proxy {backend}
	}`

func TestTwoChannelAlipay(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pub := platformtest.WriteFile(t, "alipay_public_key.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	alipay := platformtest.Alipay{Key: k}
	be := newBackend(t)
	be.setAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		if r.URL.Path == "/alipay/return" {
			// A legacy return handler that redirects after its business logic.
			return http.StatusFound, "", 30 * time.Millisecond
		}
		return 200, "success", 30 * time.Millisecond
	})
	base := startCaddy(t, twoChannelSite, "{pub}", pub, "{backend}", be.addr())

	notifyOf := func(order string) delivery {
		return delivery{path: "/alipay/notify", ctype: "application/x-www-form-urlencoded; charset=utf-8",
			body: alipay.Body(t, platformtest.AlipayNotify(testAlipayAppID, order, "2026"+order, "TRADE_SUCCESS", "30.00"))}
	}
	returnOf := func(order string) delivery {
		return delivery{method: http.MethodGet, path: "/alipay/return",
			query: alipay.Query(t, platformtest.AlipayReturn(testAlipayAppID, order, "2026"+order, "30.00"))}
	}
	landing := func(order string) string { return "https://shop.example.com/orders/" + order }
	// checkNotify: Alipay always gets "success", forwarded or not.
	checkNotify := func(t *testing.T, r reply, replayed bool) {
		t.Helper()
		if r.status != 200 || strings.TrimSpace(r.body) != "success" || r.replayed != replayed {
			t.Fatalf("notify: got %d %q replayed=%v, want 200 success replayed=%v", r.status, r.body, r.replayed, replayed)
		}
	}
	// checkReturn: the browser gets the backend's redirect when forwarded,
	// the on_duplicate redirect otherwise.
	checkReturn := func(t *testing.T, order string, r reply, replayed bool) {
		t.Helper()
		if r.status != http.StatusFound || r.replayed != replayed {
			t.Fatalf("return: got %d replayed=%v, want 302 replayed=%v", r.status, r.replayed, replayed)
		}
		if loc := r.header.Get("Location"); replayed && loc != landing(order) {
			t.Fatalf("return: redirected to %q, want %q", loc, landing(order))
		}
	}

	t.Run("notify first", func(t *testing.T) {
		order := "tc-n1"
		checkNotify(t, send(t, base, order, notifyOf(order)), false)
		checkReturn(t, order, send(t, base, order, returnOf(order)), true)
		checkNotify(t, send(t, base, order, notifyOf(order)), true) // Alipay's retry
		checkReturn(t, order, send(t, base, order, returnOf(order)), true)
		if n := be.count(order); n != 1 {
			t.Fatalf("backend ran %d times, want 1", n)
		}
	})
	t.Run("return first", func(t *testing.T) {
		order := "tc-r1"
		checkReturn(t, order, send(t, base, order, returnOf(order)), false)
		checkNotify(t, send(t, base, order, notifyOf(order)), true)
		checkReturn(t, order, send(t, base, order, returnOf(order)), true) // the browser reloads
		checkNotify(t, send(t, base, order, notifyOf(order)), true)
		if n := be.count(order); n != 1 {
			t.Fatalf("backend ran %d times, want 1", n)
		}
	})
	t.Run("concurrently", func(t *testing.T) {
		for round := range 4 {
			order := "tc-c" + itoa(round)
			// Pre-sign so the copies leave together.
			ds := make([]delivery, 12)
			for i := range ds {
				if i%2 == 0 {
					ds[i] = notifyOf(order)
				} else {
					ds[i] = returnOf(order)
				}
			}
			replies := storm(t, len(ds), func(i int) reply { return send(t, base, order, ds[i]) })
			forwarded := 0
			for i, r := range replies {
				if !r.replayed {
					forwarded++
				}
				if i%2 == 0 {
					checkNotify(t, r, r.replayed)
				} else {
					checkReturn(t, order, r, r.replayed)
				}
			}
			if n := be.count(order); n != 1 || forwarded != 1 {
				t.Fatalf("round %d: backend ran %d times, %d copies forwarded; want 1 and 1", round, n, forwarded)
			}
		}
	})
}
