package gatewaytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reply is what a client got.
type Reply struct {
	Status   int
	Body     string
	Header   http.Header
	Replayed bool // Idempotent-Replayed: true
}

// Client is the tests' HTTP client: a long time-out, many connections.
var Client = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConnsPerHost: 200,
	},
}

// Notify posts a form notification for order to base's /notify, with
// total_amount 9.90 and extra fields (name/value pairs).
func Notify(t testing.TB, base, order string, extra ...string) Reply {
	t.Helper()
	form := url.Values{"out_trade_no": {order}, "total_amount": {"9.90"}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	return Post(t, base+"/notify", "application/x-www-form-urlencoded", form.Encode(), nil)
}

// Post sends body to u; a transport error fails the test (not fatally)
// and returns the zero Reply.
func Post(t testing.TB, u, ctype, body string, hdr http.Header) Reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := Client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", u, err)
		return Reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Body: string(b), Header: resp.Header,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// Storm sends n copies at once and returns the replies.
func Storm[R any](n int, send func(i int) R) []R {
	out := make([]R, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = send(i)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// Eventually polls cond every 10ms until it holds, failing the test after
// within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MustJSON is v as JSON.
func MustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
