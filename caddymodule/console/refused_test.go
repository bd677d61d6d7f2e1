package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestConsoleRefusedPage: the refused page with nothing refused says so;
// a since that does not read is a 400 naming the forms it takes; a POST
// is refused (405); a scope no route has now is still offered in the
// filter, as its refusals may be kept.
func TestConsoleRefusedPage(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, `
	route /shop/notify {
		idempotency {
			scope shop
			key {idempotency.json.order.id}
			store memory
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{backend}", be.Addr())

	st, page := getPage(t, base+"/console/refused")
	if st != 200 || !strings.Contains(page, `<h2 id="refused-count">No refused notifications</h2>`) || !strings.Contains(page, "Nothing refused") {
		t.Fatalf("empty page: %d\n%s", st, page)
	}
	st, page = getPage(t, base+"/console/refused?since=yesterday")
	if st != 400 || !strings.Contains(page, "RFC 3339") {
		t.Errorf("bad since: %d\n%s", st, page)
	}
	st, page = getPage(t, base+"/console/refused?scope=gone&since=1h")
	if st != 200 || !strings.Contains(page, `<option value="gone" selected>gone</option>`) ||
		!strings.Contains(page, `<option value="1h" selected>`) || !strings.Contains(page, "in scope <code>gone</code> in that time") {
		t.Errorf("filtered to a gone scope:\n%s", page)
	}
	resp, err := gatewaytest.Client.Post(base+"/console/refused", "application/x-www-form-urlencoded", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}
