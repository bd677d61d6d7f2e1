package caddymodule

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// refusalSite has a route per refusal: a body-keyed generic route with a
// small max_body and a fingerprint, a Stripe route, and a route whose
// Redis is a closed port. {errors} adds a handle_errors block or nothing.
const refusalSite = `
	handle /notify {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope refusals
			fingerprint {idempotency.form.total_amount}
			store embedded {db}
			max_body 256
		}
		reverse_proxy {backend}
	}
	handle /json {
		idempotency {
			key {idempotency.json.id}
			scope refusals-json
			store embedded {db}
		}
		reverse_proxy {backend}
	}
	handle /stripe {
		idempotency {
			platform stripe
			secret whsec_refusals
			store embedded {db}
		}
		reverse_proxy {backend}
	}
	handle /down {
		idempotency {
			key {idempotency.form.out_trade_no}
			scope refusals-down
			store redis {redis}
			store_timeout 500ms
		}
		reverse_proxy {backend}
	}
	{errors}`

// TestRefusalBodies: each refusal answers one line naming its reason
// class — without handle_errors written by the gateway, with the README's
// handle_errors through {err.message} — and never an internal address,
// file path or driver message; the full reason is in the log. None of
// them reaches the backend.
func TestRefusalBodies(t *testing.T) {
	for _, errors := range []string{"", "handle_errors {\n\t\trespond \"{err.status_code} {err.message}\"\n\t}"} {
		name := "default"
		if errors != "" {
			name = "handle_errors"
		}
		t.Run(name, func(t *testing.T) {
			be := newBackend(t)
			dir := t.TempDir()
			db := dir + "/refusals.db"
			redisAddr := reservePort(t) // nothing listens there
			logFile := dir + "/caddy.log"
			base := startCaddyWith(t, caddyGlobals{log: "output file " + logFile + "\n\t\tformat json"},
				strings.Trim(refusalSite, "\n"),
				"{backend}", be.addr(), "{db}", db, "{redis}", redisAddr, "{errors}", errors)
			if r := notify(t, base, "rf-1"); r.status != 200 {
				t.Fatalf("first copy: %d %q", r.status, r.body)
			}
			form := "application/x-www-form-urlencoded"
			stripeHdr := http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 0)}}
			for _, c := range []struct {
				name, path, ctype, body string
				hdr                     http.Header
				want                    string
			}{
				{"no key", "/notify", form, "total_amount=9.90", nil, "400 key: {idempotency.form.out_trade_no} is empty"},
				{"body unparsable", "/json", "application/json", "{not json", nil, "400 key: "},
				{"bad signature", "/stripe", "application/json", `{"id":"evt_rf","type":"x"}`, stripeHdr, "401 signature verification failed"},
				{"body too large", "/notify", form, "out_trade_no=rf-2&pad=" + strings.Repeat("x", 300), nil, "413 body larger than max_body (256 bytes)"},
				{"conflict", "/notify", form, "out_trade_no=rf-1&total_amount=0.01", nil, "422 same key, different fingerprint"},
				{"store down", "/down", form, "out_trade_no=rf-3", nil, "503 store unavailable, retry later"},
			} {
				r := post(t, base+c.path, c.ctype, c.body, c.hdr)
				body := strings.TrimSuffix(r.body, "\n")
				if !strings.HasPrefix(body, c.want) || strings.Contains(body, "\n") {
					t.Errorf("%s: got %d %q, want one line starting %q", c.name, r.status, r.body, c.want)
				}
				if fmt.Sprint(r.status) != c.want[:3] {
					t.Errorf("%s: status %d, want %s", c.name, r.status, c.want[:3])
				}
				for _, leak := range []string{"127.0.0.1", redisAddr, "dial tcp", "connection refused", "redis", dir, "Stripe-Signature", "v1"} {
					if strings.Contains(r.body, leak) {
						t.Errorf("%s: the answer %q shows %q", c.name, r.body, leak)
					}
				}
			}
			if n := be.totalHits(); n != 1 {
				t.Errorf("backend ran %d times, want 1 (the first copy only)", n)
			}
			// The detail is in the log.
			eventually(t, 5*time.Second, "the refusals' detail in the log", func() bool {
				b, _ := os.ReadFile(logFile)
				return strings.Contains(string(b), "connection refused") && strings.Contains(string(b), "no v1 signature matches") &&
					strings.Contains(string(b), "possible tampering")
			})
		})
	}
}
