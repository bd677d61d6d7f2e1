package command

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
	"github.com/idemgate/idemgate/platforms"
)

// eventCase is one platform's route for TestSendEveryEvent: its
// idempotency lines and the backend behind it, which verifies what it is
// sent (with the platform's SDK where the repository has one) and names
// each business event its own way.
type eventCase struct {
	platform string
	route    func(keys string) string
	backend  func(t *testing.T, keys string) backend
	// key is the gateway's key for event sent with id, order and refund;
	// ran is the backend's name for it.
	key, ran func(event, id, order, refund string) string
	// order is the order page of id's trade; "" where each event is its own.
	order func(id string) string
	// skip: events this backend cannot read (gopay reads POST bodies only).
	skip string
}

// backend is an SDK backend or PayPal's recorder.
type backend interface {
	http.Handler
	Runs(event string) int
	Total() int
	Refusals() []string
}

func readKey(t *testing.T, keys, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(keys, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func alipayEvent(event string) string {
	return map[string]string{"paid": "paid", "closed": "closed", "finished": "paid", "return": "paid", "created": "created"}[event]
}

func alipayRan(event, id, _, refund string) string {
	if event == "refund" {
		return id + ":refund:" + refund
	}
	return id + ":" + map[string]string{"paid": "TRADE_SUCCESS", "closed": "TRADE_CLOSED", "finished": "TRADE_FINISHED",
		"return": "return", "created": "WAIT_BUYER_PAY"}[event]
}

func alipayKey(event, id, _, refund string) string {
	if event == "refund" {
		return "alipay:2021000000000001:" + id + ":refund:" + refund
	}
	return "alipay:2021000000000001:" + id + ":" + alipayEvent(event)
}

// wechatKey is WeChat Pay's keys (v3 and v2) under merchant.
func wechatKey(scope, merchant string) func(event, id, order, refund string) string {
	return func(event, id, _, refund string) string {
		k := scope + ":" + merchant + ":" + id + ":"
		switch event {
		case "refund":
			return k + "refund:" + refund
		case "refund_abnormal":
			return k + "refund:" + refund + ":abnormal"
		case "refund_closed":
			return k + "refund:" + refund + ":closed"
		}
		return k + event
	}
}

func eventCases() []eventCase {
	alipayRoute := func(keys string) string {
		return "platform alipay\n\t\t\tpublic_key " + filepath.Join(keys, "alipay_public_key.pem") + "\n\t\t\treturn business" // `send --event return` too
	}
	own := func(scope string) func(event, id, order, refund string) string {
		return func(_, id, _, _ string) string { return scope + ":" + id }
	}
	byID := func(_, id, _, _ string) string { return id }
	return []eventCase{
		{platform: "alipay", route: alipayRoute,
			backend: func(t *testing.T, keys string) backend {
				return sdkbackend.Alipay(readKey(t, keys, "alipay_public_key.pem"))
			},
			key: alipayKey, ran: alipayRan, order: func(id string) string { return "alipay:2021000000000001:" + id }},
		{platform: "alipay", route: alipayRoute, skip: "return",
			backend: func(t *testing.T, keys string) backend {
				return sdkbackend.AlipayGopay(readKey(t, keys, "alipay_public_key.pem"))
			},
			key: alipayKey, ran: alipayRan, order: func(id string) string { return "alipay:2021000000000001:" + id }},
		{platform: "wechatpay",
			route: func(keys string) string {
				return "platform wechatpay\n\t\t\tpublic_key " + filepath.Join(keys, "wechatpay_public_key.pem") +
					"\n\t\t\tpublic_key_id " + readKeyNoT(keys, "wechatpay_public_key_id") + "\n\t\t\tsecret " + readKeyNoT(keys, "wechatpay_apiv3_key")
			},
			backend: func(t *testing.T, keys string) backend {
				block, _ := pem.Decode([]byte(readKey(t, keys, "wechatpay_public_key.pem")))
				pub, err := x509.ParsePKIXPublicKey(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				return sdkbackend.WechatPayPublicKey(readKey(t, keys, "wechatpay_apiv3_key"), readKey(t, keys, "wechatpay_public_key_id"), pub.(*rsa.PublicKey))
			},
			key: wechatKey("wechatpay", "1230000109"),
			ran: func(event, id, _, refund string) string {
				if event == "paid" {
					return id + ":paid"
				}
				return "refund:" + refund + ":" + map[string]string{"refund": "SUCCESS", "refund_abnormal": "ABNORMAL", "refund_closed": "CLOSED"}[event]
			},
			order: func(id string) string { return "wechatpay:1230000109:" + id }},
		{platform: "wechatpay_v2",
			route: func(keys string) string {
				return "platform wechatpay_v2\n\t\t\tsecret " + readKeyNoT(keys, "wechatpay_v2_api_key") + "\n\t\t\tmchid 10000100"
			},
			backend: func(t *testing.T, keys string) backend {
				return sdkbackend.WechatPayV2(readKey(t, keys, "wechatpay_v2_api_key"))
			},
			key: wechatKey("wechatpay_v2", "10000100"),
			ran: func(event, id, _, refund string) string {
				if event == "paid" || event == "failed" {
					return id + ":paid" // the SDK backend names every payment result so
				}
				return "refund:" + refund + ":" + map[string]string{"refund": "SUCCESS", "refund_abnormal": "CHANGE", "refund_closed": "REFUNDCLOSE"}[event]
			},
			order: func(id string) string { return "wechatpay_v2:10000100:" + id }},
		{platform: "stripe",
			route: func(keys string) string {
				return "platform stripe\n\t\t\tsecret " + readKeyNoT(keys, "stripe_webhook_secret")
			},
			backend: func(t *testing.T, keys string) backend {
				return sdkbackend.Stripe(readKey(t, keys, "stripe_webhook_secret"))
			},
			key: own("stripe"), ran: byID},
		{platform: "standard_webhooks",
			route: func(keys string) string {
				return "platform standard_webhooks\n\t\t\tsecret " + readKeyNoT(keys, "standard_webhooks_secret")
			},
			backend: func(t *testing.T, keys string) backend {
				return sdkbackend.StandardWebhooks(readKey(t, keys, "standard_webhooks_secret"))
			},
			key: own("standard_webhooks"), ran: byID},
		{platform: "paypal",
			route: func(keys string) string {
				return "platform paypal\n\t\t\twebhook_id " + readKeyNoT(keys, "paypal_webhook_id") +
					"\n\t\t\tcertificate " + filepath.Join(keys, "paypal_cert.pem")
			},
			backend: func(*testing.T, string) backend { return newPaypalRecorder() },
			key:     own("paypal"), ran: func(event, id, _, _ string) string { return id + ":" + event }},
	}
}

func readKeyNoT(keys, name string) string {
	b, _ := os.ReadFile(filepath.Join(keys, name))
	return strings.TrimSpace(string(b))
}

// paypalRecorder stands in for a PayPal backend (the repository has no
// PayPal SDK backend): it reads each event and counts it by id and type.
type paypalRecorder struct {
	mu       sync.Mutex
	runs     map[string]int
	refusals []string
}

func newPaypalRecorder() *paypalRecorder { return &paypalRecorder{runs: map[string]int{}} }

func (p *paypalRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var raw map[string]any
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := json.Unmarshal(b, &raw); err != nil || r.Header.Get("Paypal-Transmission-Sig") == "" {
		p.refusals = append(p.refusals, fmt.Sprintf("%v %q", err, b))
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	id, _ := raw["id"].(string)
	typ, _ := raw["event_type"].(string)
	p.runs[id+":"+typ]++
}

func (p *paypalRecorder) Runs(e string) int { p.mu.Lock(); defer p.mu.Unlock(); return p.runs[e] }
func (p *paypalRecorder) Refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refusals...)
}

func (p *paypalRecorder) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.runs {
		n += c
	}
	return n
}

// TestSendEveryEvent: for every preset and every event its send lists,
// `send --event` against the real module, in front of a backend that
// verifies with the platform's SDK (smartwalle/alipay and gopay for
// Alipay, the browser return by smartwalle; wechatpay-go, which decrypts
// the v3 refund; gopay, which decrypts the v2 refund's req_info;
// stripe-go; the Standard Webhooks library; PayPal's events read by a
// recorder): each is verified, keyed by its business event, forwarded
// once and its duplicate replayed; a payment and its refund, sent with
// the line send prints after the payment, are two events of one order,
// both on the order's page.
func TestSendEveryEvent(t *testing.T) {
	for _, c := range eventCases() {
		name := c.platform
		if c.skip != "" {
			name += "-post-only"
		}
		t.Run(name, func(t *testing.T) {
			keys := t.TempDir()
			if out, err := runIdem(t, "keygen", "--platform", c.platform, "--dir", keys); err != nil {
				t.Fatalf("keygen: %v\n%s", err, out)
			}
			be := c.backend(t, keys)
			srv := httptest.NewServer(be)
			defer srv.Close()
			g := gatewaytest.StartGateway(t, "\n\thandle /notify {\n\t\tidempotency {\n\t\t\t"+c.route(keys)+
				"\n\t\t\tstore memory\n\t\t}\n\t\treverse_proxy "+strings.TrimPrefix(srv.URL, "http://")+"\n\t}")
			u := g.Base + "/notify"
			sender := platforms.SenderOf(c.platform)

			type sent struct{ event, id, order, refund string }
			var all []sent
			// send sends args twice: the first copy is forwarded and keyed
			// as want, the second replayed.
			send := func(s sent, args ...string) string {
				t.Helper()
				args = append([]string{"send", "--platform", c.platform, "--url", u, "--dir", keys, "--timeout", "20s"}, args...)
				out, err := runIdem(t, args...)
				if err != nil || !answered2xx.MatchString(out) || strings.Contains(out, "Replayed") {
					t.Fatalf("send %v: %v\n%s", args, err, out)
				}
				key := c.key(s.event, s.id, s.order, s.refund)
				if rec := gatewaytest.Record(t, key); rec == nil || rec.State != "answered" {
					t.Fatalf("send %s: no answered record for %s (%+v)\n%s", s.event, key, rec, out)
				}
				again, err := runIdem(t, args...)
				if err != nil || !answered2xx.MatchString(again) || !strings.Contains(again, "  Idempotent-Replayed: true\n") {
					t.Fatalf("send %s again: %v\n%s", s.event, err, again)
				}
				all = append(all, s)
				return out
			}

			// The payment, then its refund with the line send printed.
			paid := sender.Events[0].Name
			p := sent{paid, "2026031400" + c.platform, "", ""}
			p.order = "o-" + p.id
			out := send(p, "--id", p.id)
			m := refundLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("send %s prints no line to refund the order:\n%s", paid, out)
			}
			r := sent{sender.RefundEvent, p.id, p.order, p.order + "-r1"}
			args := strings.Fields(m[1])
			if !sender.TradeID {
				r.id = "2026031401" + c.platform
				args = append(args, "--id", r.id)
			}
			send(r, args...)
			if c.order != nil {
				var v admin.OrderView
				g.AdminJSON(t, http.MethodGet, "/idempotency/orders/"+url.PathEscape(c.order(p.id)), &v)
				var events []string
				for _, e := range v.Events {
					events = append(events, e.Event+" "+e.Amount)
				}
				if want := []string{"paid 9.90", "refund:" + r.refund + " 9.90"}; strings.Join(events, ",") != strings.Join(want, ",") {
					t.Errorf("the order's page shows %v, want %v", events, want)
				}
			}

			// Every other event, each of its own trade.
			for i, e := range sender.Events {
				if e.Name == paid || e.Name == sender.RefundEvent || e.Name == c.skip {
					continue
				}
				s := sent{e.Name, fmt.Sprintf("2026031402%d%s", i, c.platform), "", ""}
				s.order = "o-" + s.id
				s.refund = s.order + "-r1"
				send(s, "--event", e.Name, "--id", s.id)
			}

			if refused := be.Refusals(); len(refused) != 0 {
				t.Errorf("the backend refused: %v", refused)
			}
			for _, s := range all {
				if n := be.Runs(c.ran(s.event, s.id, s.order, s.refund)); n != 1 {
					t.Errorf("%s ran %d times at the backend (as %q), want 1", s.event, n, c.ran(s.event, s.id, s.order, s.refund))
				}
			}
			if be.Total() != len(all) {
				t.Errorf("the backend ran %d times for %d events sent twice each", be.Total(), len(all))
			}
		})
	}
}

var answered2xx = regexp.MustCompile(`(?m)^HTTP/1.1 2\d\d `)

var refundLine = regexp.MustCompile(`\(refund this order: (.*)\)\n`)

// TestSendEventList: --event without a value, or one the platform does
// not send, is an error listing the platform's events, and nothing is
// sent.
func TestSendEventList(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer srv.Close()
	for _, args := range [][]string{{"--event"}, {"--event", "refnd"}, {"--event="}} {
		for _, p := range sendPlatforms {
			_, err := runIdem(t, append([]string{"send", "--platform", p, "--url", srv.URL, "--dir", t.TempDir()}, args...)...)
			if err == nil {
				t.Fatalf("send --platform %s %v: no error", p, args)
			}
			for _, e := range platforms.SenderOf(p).Events {
				if !strings.Contains(err.Error(), "\n  "+e.Name+" ") {
					t.Errorf("send --platform %s %v: %q does not list %s", p, args, err, e.Name)
				}
			}
		}
	}
	_, err := runIdem(t, "send", "--url", srv.URL, "--event")
	if err == nil || !strings.Contains(err.Error(), "charge.refunded") || !strings.Contains(err.Error(), "finished") {
		t.Errorf("send --event without --platform: %v, want every platform's events", err)
	}
	if hits != 0 {
		t.Errorf("an unknown event was sent %d times", hits)
	}
}

// TestSendEventsSameBody: every event sent again with the same flags
// carries the same body where the platform's retries do (all but
// Alipay's), and no two events of one id share a body.
func TestSendEventsSameBody(t *testing.T) {
	for _, p := range sendPlatforms {
		if p == "alipay" {
			continue
		}
		t.Run(p, func(t *testing.T) {
			keys := t.TempDir()
			if out, err := runIdem(t, "keygen", "--platform", p, "--dir", keys); err != nil {
				t.Fatalf("keygen: %v\n%s", err, out)
			}
			seen := map[string]string{}
			for _, e := range platforms.SenderOf(p).Events {
				o := sendOptions{platform: p, event: e.Name, id: "same-1", order: "o-same-1", amount: 990,
					refund: "o-same-1-r1", refundAmount: 990, dir: keys, flags: map[string]string{"sign-type": "MD5"}}
				first, err := buildNotification(o)
				if err != nil {
					t.Fatal(err)
				}
				second, err := buildNotification(o)
				if err != nil {
					t.Fatal(err)
				}
				if string(first.body) != string(second.body) {
					t.Errorf("%s: two sends of one notification differ:\n%s\n%s", e.Name, first.body, second.body)
				}
				if other, ok := seen[string(first.body)]; ok {
					t.Errorf("%s and %s have the same body", other, e.Name)
				}
				seen[string(first.body)] = e.Name
			}
		})
	}
}
