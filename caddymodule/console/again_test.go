package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// TestConsoleRedeliverAnsweredAsksAgain: an answered key's page says its
// backend already ran it (when, the status) on a required confirmation;
// a forced redelivery without that confirmation is refused and runs
// nothing, and with it the backend runs a second time.
func TestConsoleRedeliverAnsweredAsksAgain(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, consoleSite, "{backend}", be.Addr())
	const key = "shop:A-1"
	if r := postShop(t, base, "A-1"); r.Status != 200 {
		t.Fatalf("notification: %d", r.Status)
	}
	status, page := getPage(t, base+"/console/key?"+url.Values{"store": {"memory"}, "k": {key}}.Encode())
	form, _, _ := strings.Cut(page[strings.Index(page, `id="redeliver"`)+1:], "</form>")
	if status != 200 || !strings.Contains(form, `name="again" value="yes" required`) ||
		!strings.Contains(form, "the backend already ran it (answered at ") || !strings.Contains(form, "status 200") ||
		strings.Contains(form, `name="force"`) {
		t.Fatalf("answered key's redelivery form: %d\n%s", status, form)
	}
	origin := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	post := url.Values{"csrf": {consoleToken}, "store": {"memory"}, "k": {key}, "force": {"yes"}}
	if got := consolePost(t, base+"/console/redeliver", post, origin); got != http.StatusConflict {
		t.Errorf("forced redelivery without the confirmation: %d, want 409", got)
	}
	if n := be.Count("A-1"); n != 1 {
		t.Fatalf("the backend ran %d times, want 1: a refused redelivery ran it", n)
	}
	post = url.Values{"csrf": {consoleToken}, "store": {"memory"}, "k": {key}, "again": {"yes"}}
	if got := consolePost(t, base+"/console/redeliver", post, origin); got != http.StatusSeeOther {
		t.Fatalf("confirmed redelivery: %d, want 303", got)
	}
	if n := be.Count("A-1"); n != 2 {
		t.Fatalf("the backend ran %d times after the confirmed redelivery, want 2", n)
	}
}
