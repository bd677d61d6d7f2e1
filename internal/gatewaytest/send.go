package gatewaytest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Delivery is one signed copy of a notification, as the platform sends it.
type Delivery struct {
	Method string // default POST
	Path   string // set by the test from the route
	Query  string // GET: the signed query
	Ctype  string
	Body   string
	Header http.Header
}

// NoRedirects is a client that shows a redirect instead of following it,
// as the tests need to see where the browser would land.
var NoRedirects = &http.Client{
	Timeout:       30 * time.Second,
	Transport:     Client.Transport,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Send delivers d to base; X-Order tells the counting backend which order
// it is (the gateway ignores it: preset keys come from signed content). A
// transport error fails the test (not fatally) and returns the zero Reply.
func Send(t testing.TB, base, order string, d Delivery) Reply {
	t.Helper()
	method := d.Method
	if method == "" {
		method = http.MethodPost
	}
	u := base + d.Path
	if d.Query != "" {
		u += "?" + d.Query
	}
	var body io.Reader
	if d.Body != "" {
		body = strings.NewReader(d.Body)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d.Header {
		req.Header[k] = v
	}
	if d.Ctype != "" {
		req.Header.Set("Content-Type", d.Ctype)
	}
	req.Header.Set("X-Order", order)
	resp, err := NoRedirects.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, u, err)
		return Reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Body: string(b), Header: resp.Header,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}
