package alipay

import (
	"net/http"
	"testing"
)

// TestChannels: the notify (POST) succeeds on 200 + success only; the
// browser return (GET, HEAD) on the shop's page or a redirect.
func TestChannels(t *testing.T) {
	for _, c := range []struct {
		method string
		status int
		body   string
		want   bool
	}{
		{http.MethodPost, 200, "success", true},
		{http.MethodPost, 200, "<html>thanks</html>", false},
		{http.MethodPost, 302, "", false},
		{http.MethodGet, 200, "<html>thanks</html>", true},
		{http.MethodGet, 302, "", true},
		{http.MethodHead, 204, "", true},
		{http.MethodGet, 404, "", false},
		{http.MethodGet, 500, "success", false},
	} {
		ch := Preset.ChannelOf(c.method)
		if ch == nil {
			t.Fatalf("%s: no channel", c.method)
		}
		if got := ch.Success(c.status, http.Header{}, []byte(c.body)); got != c.want {
			t.Errorf("%s %d %q on %s: success=%v, want %v", c.method, c.status, c.body, ch.Name, got, c.want)
		}
	}
	if Preset.ChannelOf(http.MethodPut) != nil {
		t.Error("PUT should take no channel (the platform's rule judges it)")
	}
}
