package legacy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func do(t *testing.T, h http.Handler, method, target, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const formType = "application/x-www-form-urlencoded"

func TestNotifyFindsOrder(t *testing.T) {
	tests := []struct {
		name        string
		target      string
		contentType string
		body        string
		wantOrder   string
	}{
		{"form out_trade_no", "/notify", formType, "out_trade_no=o-1&total_amount=9.90", "o-1"},
		{"form order_id", "/notify", formType, "order_id=o-2", "o-2"},
		{"form prefers out_trade_no", "/notify", formType, "order_id=x&out_trade_no=o-3", "o-3"},
		{"query", "/notify?out_trade_no=o-4", "", "", "o-4"},
		{"json", "/notify", "application/json", `{"order_id":"o-5","amount":1}`, "o-5"},
		{"json numeric id kept exact", "/notify", "application/json", `{"order_id":12345678901234567890}`, "12345678901234567890"},
		{"json without content type", "/notify", "", ` {"order_id":"o-7"}`, "o-7"},
		{"json out_trade_no", "/notify", "application/json; charset=utf-8", `{"out_trade_no":"o-8"}`, "o-8"},
		{"json event id", "/notify", "application/json", `{"id":"evt_1","type":"invoice.paid"}`, "evt_1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{Log: io.Discard})
			rec := do(t, b, http.MethodPost, tt.target, tt.contentType, tt.body)
			if rec.Code != http.StatusOK || rec.Body.String() != "success" {
				t.Fatalf("got %d %q, want 200 success", rec.Code, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type = %q, want text/plain", ct)
			}
			if n := b.Renewals(tt.wantOrder); n != 1 {
				t.Errorf("renewals of %q = %d, want 1 (stats %+v)", tt.wantOrder, n, b.Stats())
			}
		})
	}
}

// WeChat Pay v2 posts XML and stops retrying only on an XML return_code SUCCESS.
func TestNotifyXML(t *testing.T) {
	const body = `<xml><appid><![CDATA[wx1]]></appid><out_trade_no><![CDATA[o-9]]></out_trade_no><total_fee>990</total_fee></xml>`
	tests := []struct {
		name        string
		contentType string
		body        string
		order       string
		wantCode    int
		wantReturn  string
	}{
		{"text/xml", "text/xml", body, "o-9", 200, "SUCCESS"},
		{"sniffed", "", "\n" + body, "o-9", 200, "SUCCESS"},
		{"order_id", "application/xml", `<xml><order_id>o-10</order_id></xml>`, "o-10", 200, "SUCCESS"},
		{"failing order", "text/xml", `<xml><out_trade_no>fail-1</out_trade_no></xml>`, "", 500, "FAIL"},
		{"no order id", "text/xml", `<xml><appid>wx1</appid></xml>`, "", 400, "FAIL"},
		{"v2 refund's req_info", "text/xml", `<xml><mch_id>1230000109</mch_id><req_info><![CDATA[cmVmdW5k]]></req_info></xml>`, "refund-" + reqInfoDigest("cmVmdW5k"), 200, "SUCCESS"},
		{"not XML", "text/xml", `<xml><out_trade_no>`, "", 400, "FAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{Log: io.Discard})
			rec := do(t, b, http.MethodPost, "/notify", tt.contentType, tt.body)
			want := "<return_code><![CDATA[" + tt.wantReturn + "]]></return_code>"
			if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), want) {
				t.Fatalf("got %d %q, want %d with %s", rec.Code, rec.Body.String(), tt.wantCode, want)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/xml") {
				t.Errorf("Content-Type = %q, want text/xml", ct)
			}
			if tt.order != "" && b.Renewals(tt.order) != 1 {
				t.Errorf("renewals of %q = %d, want 1", tt.order, b.Renewals(tt.order))
			}
		})
	}
}

func TestNotifyRejects(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantCode    int
	}{
		{"no order id", http.MethodPost, formType, "trade_no=1", http.StatusBadRequest},
		{"empty body", http.MethodPost, "", "", http.StatusBadRequest},
		{"bad json", http.MethodPost, "application/json", `{"order_id":`, http.StatusBadRequest},
		{"bad form", http.MethodPost, formType, "out_trade_no=%zz", http.StatusBadRequest},
		{"GET", http.MethodGet, "", "", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{Log: io.Discard})
			rec := do(t, b, tt.method, "/notify", tt.contentType, tt.body)
			if rec.Code != tt.wantCode {
				t.Fatalf("got %d %q, want %d", rec.Code, rec.Body.String(), tt.wantCode)
			}
			if s := b.Stats(); s.Total != 0 || s.Failed != 0 {
				t.Errorf("stats = %+v, want nothing counted", s)
			}
		})
	}
}

// The backend has no idempotency check: every copy renews again.
func TestDuplicatesRenewAgain(t *testing.T) {
	var logs strings.Builder
	b := New(Config{Log: &logs})
	for range 3 {
		do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=o-1")
	}
	if n := b.Renewals("o-1"); n != 3 {
		t.Fatalf("renewals = %d, want 3", n)
	}
	for _, want := range []string{"renewed order o-1 (time #1)", "renewed order o-1 (time #3)"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestFailureModes(t *testing.T) {
	t.Run("fail first", func(t *testing.T) {
		b := New(Config{FailFirst: 2, Log: io.Discard})
		var got []int
		for range 3 {
			rec := do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=o-1")
			got = append(got, rec.Code)
			if rec.Code != http.StatusOK && rec.Body.String() != "fail" {
				t.Errorf("failure body = %q, want fail", rec.Body.String())
			}
		}
		if want := []int{500, 500, 200}; !slices.Equal(got, want) {
			t.Fatalf("codes = %v, want %v", got, want)
		}
		if s := b.Stats(); s.Total != 1 || s.Failed != 2 {
			t.Fatalf("stats = %+v, want 1 renewal, 2 failed", s)
		}
		b.Reset()
		if rec := do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=o-1"); rec.Code != 500 {
			t.Fatalf("after reset got %d, want the FailFirst budget back (500)", rec.Code)
		}
	})
	t.Run("fail- prefix", func(t *testing.T) {
		b := New(Config{Log: io.Discard})
		for range 2 {
			rec := do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=fail-9")
			if rec.Code != 500 || rec.Body.String() != "fail" {
				t.Fatalf("got %d %q, want 500 fail", rec.Code, rec.Body.String())
			}
		}
		if s := b.Stats(); s.Total != 0 || s.Failed != 2 || len(s.Renewals) != 0 {
			t.Fatalf("stats = %+v, want 0 renewals, 2 failed", s)
		}
	})
}

func TestStatsAndReset(t *testing.T) {
	b := New(Config{Log: io.Discard})
	do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=a")
	do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=a")
	do(t, b, http.MethodPost, "/notify", formType, "out_trade_no=b")

	rec := do(t, b, http.MethodGet, "/stats", "", "")
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var s Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("stats body %q: %v", rec.Body.String(), err)
	}
	if s.Total != 3 || s.Renewals["a"] != 2 || s.Renewals["b"] != 1 {
		t.Fatalf("stats = %+v", s)
	}

	if rec := do(t, b, http.MethodPost, "/reset", "", ""); rec.Code != http.StatusNoContent {
		t.Fatalf("reset: %d", rec.Code)
	}
	rec = do(t, b, http.MethodGet, "/stats", "", "")
	if got := strings.TrimSpace(rec.Body.String()); got != `{"renewals":{},"total":0,"failed":0}` {
		t.Fatalf("after reset: %s", got)
	}
}

func TestReturnPage(t *testing.T) {
	b := New(Config{Log: io.Discard})
	rec := do(t, b, http.MethodGet, "/return?out_trade_no=<o-1>&trade_no=2", "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("got %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type = %q", ct)
	}
	if body := rec.Body.String(); !strings.Contains(body, "Payment received") || !strings.Contains(body, "&lt;o-1&gt;") {
		t.Errorf("page lacks the result or the escaped order id:\n%s", body)
	}
	// Legacy backends run the business logic on the browser return too.
	if n := b.Renewals("<o-1>"); n != 1 {
		t.Errorf("renewals = %d, want 1", n)
	}
	if rec := do(t, b, http.MethodGet, "/return?out_trade_no=fail-1", "", ""); rec.Code != 500 {
		t.Errorf("fail- order on return: %d, want 500", rec.Code)
	}
}

// TestReturnPageOnly: with ReturnPage the return shows the page and
// renews nothing; the notify renews (Alipay's way: `return display`).
func TestReturnPageOnly(t *testing.T) {
	b := New(Config{Log: io.Discard, ReturnPage: true})
	for range 2 {
		rec := do(t, b, http.MethodGet, "/return?out_trade_no=o-1&trade_no=2", "", "")
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Payment received") {
			t.Fatalf("return: %d %s", rec.Code, rec.Body.String())
		}
	}
	if n := b.Renewals("o-1"); n != 0 {
		t.Fatalf("the return renewed %d times, want none", n)
	}
	if rec := do(t, b, http.MethodPost, "/notify", "application/x-www-form-urlencoded", "out_trade_no=o-1"); rec.Code != 200 || b.Renewals("o-1") != 1 {
		t.Fatalf("notify: %d, renewals %d; want 200 and one", rec.Code, b.Renewals("o-1"))
	}
}

func TestConcurrentRenewals(t *testing.T) {
	b := New(Config{Log: io.Discard})
	const n = 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			order := "same"
			if i%2 == 1 {
				order = "other"
			}
			do(t, b, http.MethodPost, "/notify", formType, "out_trade_no="+order)
			b.Stats()
		}()
	}
	close(start)
	wg.Wait()
	if s := b.Stats(); s.Total != n || s.Renewals["same"] != n/2 || s.Renewals["other"] != n/2 {
		t.Fatalf("stats = %+v", s)
	}
}

// The delay simulates a slow backend but gives up when the caller does,
// so tests and shutdowns never hang on it. The renewal has already happened.
func TestDelayStopsWithCaller(t *testing.T) {
	b := New(Config{Delay: time.Hour, Log: io.Discard})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/notify", strings.NewReader("out_trade_no=o-1"))
	req.Header.Set("Content-Type", formType)
	done := make(chan struct{})
	go func() {
		b.ServeHTTP(httptest.NewRecorder(), req)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler still sleeping after its caller went away")
	}
	if n := b.Renewals("o-1"); n != 1 {
		t.Errorf("renewals = %d, want 1", n)
	}
}

func reqInfoDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}
