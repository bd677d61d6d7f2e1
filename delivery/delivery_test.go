package delivery

import (
	"net/url"
	"testing"
	"time"
)

// TestDeliverTarget: the notification's path and query go after `to`'s,
// as reverse_proxy does; hop-by-hop headers stay behind.
func TestDeliverTarget(t *testing.T) {
	for _, tt := range []struct{ to, uri, want string }{
		{"http://127.0.0.1:9000", "/notify?x=1", "http://127.0.0.1:9000/notify?x=1"},
		{"http://b/base/", "/notify", "http://b/base/notify"},
		{"http://b/base", "/notify", "http://b/base/notify"},
		{"http://b/base?k=v", "/n?x=1", "http://b/base/n?k=v&x=1"},
	} {
		to, err := url.Parse(tt.to)
		if err != nil {
			t.Fatal(err)
		}
		got, err := target(to, tt.uri)
		if err != nil || got != tt.want {
			t.Errorf("to %s + %s = %s %v, want %s", tt.to, tt.uri, got, err, tt.want)
		}
	}
	h := deliveryHeaders(map[string][]string{"Connection": {"close"}, "Content-Type": {"text/xml"}, "Transfer-Encoding": {"chunked"},
		"Wechatpay-Signature": {"sig"}})
	if len(h) != 2 || h.Get("Content-Type") != "text/xml" || h.Get("Wechatpay-Signature") != "sig" {
		t.Errorf("headers %v", h)
	}
}

// TestDeliverBackoff: full jitter between retry's initial and
// min(max, initial·2^attempts), never past max, however many attempts.
func TestDeliverBackoff(t *testing.T) {
	for n := 1; n < 60; n++ {
		if b := backoff(100, 1000, n); b < 100 || b > 1000 || (n == 1 && b > 200) {
			t.Errorf("backoff(%d) = %v", n, b)
		}
	}
	if b := backoff(time.Second, time.Second, 3); b != time.Second {
		t.Errorf("initial = max: backoff %v, want 1s", b)
	}
	// Jitter: a run of draws is not one value.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[backoff(time.Millisecond, time.Minute, 10)] = true
	}
	if len(seen) < 2 {
		t.Errorf("backoff without jitter: %v", seen)
	}
}
