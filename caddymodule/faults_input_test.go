package caddymodule

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The fault suite, round two, continued: input the gateway reads in a way
// a backend may not (repeated fields, HEAD), and routes of one scope that
// do not share a store.

// rawHTTP writes req (CRLF line ends added) on a fresh connection to base
// and returns the answer's status line and the whole answer.
func rawHTTP(t *testing.T, base string, lines ...string) (status int, answer string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, strings.Join(lines, "\r\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	answer = string(b)
	if _, err := fmt.Sscanf(answer, "HTTP/1.1 %d", &status); err != nil {
		t.Fatalf("no status line in %q", answer)
	}
	return status, answer
}

// TestFaultAmbiguousKeyInput: on generic routes a key or fingerprint that
// reads a header, query or form field the request carries twice is a 400
// naming the field, never forwarded and claiming nothing: Caddy would
// join the header's values into a new key, and a backend reading another
// of the values (Go and Java read the first header, PHP, Django and Rails
// the last form field) would run twice. The unambiguous copy that follows
// is forwarded once.
func TestFaultAmbiguousKeyInput(t *testing.T) {
	be := newBackend(t)
	base := startCaddy(t, `
	handle /event {
		idempotency {
			key ev:{http.request.header.Idempotency-Key}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /form {
		idempotency {
			key {idempotency.form.out_trade_no}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /return {
		idempotency {
			key ret:{http.request.uri.query.out_trade_no}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle /fp {
		idempotency {
			key {idempotency.form.out_trade_no}
			fingerprint {http.request.header.X-Amount}
			store memory
		}
		reverse_proxy `+be.addr()+`
	}
	handle_errors {
		respond "{err.message}" {err.status_code}
	}`)
	post := func(path, body string, headers ...string) []string {
		lines := []string{"POST " + path + " HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
			"Content-Type: application/x-www-form-urlencoded", fmt.Sprintf("Content-Length: %d", len(body))}
		lines = append(lines, headers...)
		return append(lines, "", body)
	}
	for _, c := range []struct {
		name, field string
		req         []string
	}{
		{"header twice", "header Idempotency-Key", post("/event", "out_trade_no=A-1001",
			"Idempotency-Key: A-1001", "Idempotency-Key: Z-crafted", "X-Order: A-1001")},
		{"form field twice", "form field out_trade_no", post("/form", "out_trade_no=N-crafted&out_trade_no=B-2002")},
		{"query field twice", "query field out_trade_no", []string{
			"GET /return?out_trade_no=C-3003&out_trade_no=Q-crafted HTTP/1.1", "Host: 127.0.0.1", "Connection: close", "X-Order: C-3003", "", ""}},
		{"fingerprint header twice", "header X-Amount", post("/fp", "out_trade_no=D-4004", "X-Amount: 1.00", "X-Amount: 9999.00")},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, answer := rawHTTP(t, base, c.req...)
			if status != http.StatusBadRequest {
				t.Fatalf("%d, want 400:\n%s", status, answer)
			}
			if !strings.Contains(answer, c.field) {
				t.Errorf("the refusal does not name %q:\n%s", c.field, answer)
			}
		})
	}
	if n := be.totalHits(); n != 0 {
		t.Fatalf("ambiguous requests reached the backend %d times", n)
	}
	// The genuine copies, each once: nothing was claimed by the refusals.
	for range 2 {
		if s, a := rawHTTP(t, base, post("/event", "x=1", "Idempotency-Key: A-1001", "X-Order: A-1001")...); s != 200 {
			t.Fatalf("single header: %d\n%s", s, a)
		}
		if s, a := rawHTTP(t, base, post("/form", "out_trade_no=B-2002")...); s != 200 {
			t.Fatalf("single form field: %d\n%s", s, a)
		}
	}
	if be.count("A-1001") != 1 || be.count("B-2002") != 1 {
		t.Fatalf("backend ran A-1001 %d, B-2002 %d times, want 1 each", be.count("A-1001"), be.count("B-2002"))
	}
}

// TestFaultHeadNeverClaims: a HEAD of a return URL (a link checker) before
// the customer's GET is answered 405 without reaching the backend or
// claiming the key, so the GET is forwarded and gets the backend's page;
// a HEAD after it gets the replay's status and headers, no body, and the
// backend still ran once. A HEAD while Redis is down is a 503 even with
// on_store_error pass.
func TestFaultHeadNeverClaims(t *testing.T) {
	testenv.Slow(t, "fault: Redis stopped")
	rs := redistest.Start(t)
	be := newBackend(t)
	base := startCaddy(t, `
	idempotency {
		key ret:{http.request.uri.query.order}
		store redis `+rs.Addr()+`
		on_store_error pass
		store_timeout 1s
	}
	reverse_proxy `+be.addr())
	u := base + "/return?order=H-1&sign=c2lnbmVk"
	hdr := http.Header{"X-Order": {"H-1"}}
	head, err := faultSend(freshClient, http.MethodHead, u, "", hdr)
	if err != nil {
		t.Fatal(err)
	}
	if head.status != http.StatusMethodNotAllowed || head.header.Get("Allow") == "" {
		t.Fatalf("first HEAD: %d (Allow %q), want 405", head.status, head.header.Get("Allow"))
	}
	if be.count("H-1") != 0 {
		t.Fatal("the HEAD reached the backend")
	}
	get, err := faultSend(freshClient, http.MethodGet, u, "", hdr)
	if err != nil || get.status != 200 || get.body != "ok H-1" || get.replayed {
		t.Fatalf("the customer's GET: %d %q replayed=%v %v, want the backend's page", get.status, get.body, get.replayed, err)
	}
	head, err = faultSend(freshClient, http.MethodHead, u, "", hdr)
	if err != nil || head.status != 200 || !head.replayed || head.body != "" || head.header.Get("X-Backend") != "legacy" {
		t.Fatalf("HEAD after the GET: %d replayed=%v body %q %v, want the replay's headers", head.status, head.replayed, head.body, err)
	}
	again, _ := faultSend(freshClient, http.MethodGet, u, "", hdr)
	if !again.replayed || again.body != "ok H-1" {
		t.Fatalf("a later GET: %d %q replayed=%v", again.status, again.body, again.replayed)
	}
	if n := be.count("H-1"); n != 1 {
		t.Fatalf("backend ran %d times, want 1", n)
	}
	rs.Stop()
	head, err = faultSend(freshClient, http.MethodHead, base+"/return?order=H-2", "", http.Header{"X-Order": {"H-2"}})
	if err != nil || head.status != http.StatusServiceUnavailable || be.count("H-2") != 0 {
		t.Fatalf("HEAD with the store down: %d %v, backend %d; want 503, never forwarded", head.status, err, be.count("H-2"))
	}
}

// TestFaultOneScopeOneStore: the Alipay return route left on the embedded
// default while its notify route is on Redis (one scope) is refused at
// start, naming both routes' stores; on one store both start, and routes
// of other scopes may use other stores.
func TestFaultOneScopeOneStore(t *testing.T) {
	rs := redistest.Start(t)
	db := filepath.Join(t.TempDir(), "keys.db")
	routes := func(returnStore string) string {
		return `
	handle /notify {
		idempotency {
			platform alipay
			verify off
			store redis ` + rs.Addr() + `
		}
		respond "success"
	}
	handle /return {
		idempotency {
			platform alipay
			verify off
			` + returnStore + `
		}
		respond "paid"
	}
	handle /other {
		idempotency {
			key {idempotency.form.out_trade_no}
			store embedded ` + db + `
		}
		respond "ok"
	}`
	}
	_, _, err := tryCaddy(t, routes(""))
	if err == nil {
		t.Fatal("routes of one scope on two stores started")
	}
	for _, want := range []string{`scope "alipay"`, "redis:" + rs.Addr(), "embedded:", "runs twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start-up error does not say %q: %v", want, err)
		}
	}
	if _, _, err := tryCaddy(t, routes("store redis "+rs.Addr())); err != nil {
		t.Fatalf("one scope, one store: %v", err)
	}
}
