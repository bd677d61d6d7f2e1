package caddymodule

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformapi"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestCatchUpValidate: `idemgate validate` refuses recover resend on a
// platform with no resend API, a credential whose {env.*} is unset, an
// unknown subdirective and an Alipay route that pins no single app_id —
// and a good block validates without one call to the platform's API
// (validate starts no engine).
func TestCatchUpValidate(t *testing.T) {
	testenv.Slow(t, "process test (go test -short)")
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(api.Close)
	_, appKey := platformtest.Keys(t)
	der, _ := x509.MarshalPKCS8PrivateKey(appKey)
	keyFile := platformtest.WriteFile(t, "app.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	pubFile := platformtest.WriteFile(t, "pub.pem", platformtest.PublicKeyPEM(t, &appKey.PublicKey))
	t.Setenv("CATCHUP_VALIDATE_KEY", "rk_test_validate")
	site := func(body string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\thandle /n {\n\t\tidempotency {\n%s\n\t\t\tstore memory\n\t\t}\n\t\trespond 200\n\t}\n}\n", freePort(t), body)
	}
	for _, c := range []struct{ name, body, want string }{
		{"resend on alipay", "platform alipay\npublic_key " + pubFile + "\napp_id 2016091800538339\ncatch_up {\napp_private_key " + keyFile + "\nrecover resend\n}", "alipay has no resend API"},
		{"unset env", "platform stripe\nsecret " + testStripeSecret + "\ncatch_up {\napi_key {env.CATCHUP_NEVER_SET}\nendpoint we_x\nrecover resend\n}", "CATCHUP_NEVER_SET is not set"},
		{"unknown", "platform stripe\nsecret " + testStripeSecret + "\ncatch_up {\napi_key k\nfrobnicate yes\nrecover resend\n}", `unknown subdirective`},
		{"two app_ids", "platform alipay\npublic_key " + pubFile + "\napp_id 2016091800538339 2016091800538340\ncatch_up {\napp_private_key " + keyFile + "\nrecover alert\n}", "exactly one app_id"},
	} {
		out, err := validateCaddyfile(t, site(c.body))
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: validate %v, want %q in:\n%s", c.name, err, c.want, out)
		}
	}
	out, err := validateCaddyfile(t, site("platform stripe\nsecret "+testStripeSecret+"\ncatch_up {\napi "+api.URL+"\napi_key {env.CATCHUP_VALIDATE_KEY}\nendpoint we_x\nevery 10ms\ngrace 1ms\nrecover resend\n}"))
	if err != nil {
		t.Fatalf("a good block: %v\n%s", err, out)
	}
	if strings.Contains(out, "rk_test_validate") {
		t.Fatalf("the credential is in validate's output:\n%s", out)
	}
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("validate called the platform's API %d times", n)
	}
}

// TestCatchUpFleetAsksOnce: two gateway processes on one real Redis, each
// with the same catch_up block: the lease in the store lets one of them
// ask Stripe per period, so the stand-in is listed about once a period,
// not twice.
func TestCatchUpFleetAsksOnce(t *testing.T) {
	testenv.Slow(t, "process test (go test -short)")
	rd := redistest.Start(t)
	const key = "rk_test_51Fleet00000000000wxyz"
	stand := platformapi.NewStripe(key, "we_fleet", testStripeSecret, "")
	var lists atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			lists.Add(1)
		}
		stand.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	site := `
	handle /stripe {
		idempotency {
			platform stripe
			secret ` + testStripeSecret + `
			store redis ` + rd.Addr() + `
			catch_up {
				api ` + srv.URL + `
				api_key ` + key + `
				endpoint we_fleet
				every 1s
				grace 30s
				recover resend
			}
		}
		respond 200
	}`
	startProc(t, t.TempDir(), site)
	startProc(t, t.TempDir(), site)
	start := time.Now()
	time.Sleep(4 * time.Second)
	periods := int64(time.Since(start)/time.Second) + 1
	if n := lists.Load(); n < 2 || n > periods+1 {
		t.Fatalf("two instances listed Stripe's events %d times in %d periods: want about one a period", n, periods)
	}
	t.Logf("two instances listed Stripe's events %d times in %d periods", lists.Load(), periods)
}
