package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
)

// apiTimeRE is how the admin API writes every time: RFC 3339 in UTC, to
// the millisecond (the stores keep milliseconds).
var apiTimeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$`)

// TestAdminTimesAlike: first_seen, last_seen, changed, expires_at and the
// attempts' start come out in one format on every store, whichever code
// path set them.
func TestAdminTimesAlike(t *testing.T) {
	gatewaytest.EachStore(t, func(t *testing.T, name, store string) {
		be := gatewaytest.NewBackend(t)
		g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", store, "{backend}", be.Addr(), "{extra}", "")
		gatewaytest.Notify(t, g.Base, "tm-1")
		time.Sleep(3 * time.Millisecond) // a later last_seen, not rounded onto first_seen
		gatewaytest.Notify(t, g.Base, "tm-1")
		_, raw := g.AdminDo(t, http.MethodGet, gatewaytest.KeyURI("demo:tm-1"))
		var rec struct {
			FirstSeen string `json:"first_seen"`
			LastSeen  string `json:"last_seen"`
			Changed   string `json:"changed"`
			ExpiresAt string `json:"expires_at"`
			Attempts  []struct {
				Start string `json:"start"`
			} `json:"attempts"`
		}
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			t.Fatal(err)
		}
		times := map[string]string{"first_seen": rec.FirstSeen, "last_seen": rec.LastSeen, "changed": rec.Changed, "expires_at": rec.ExpiresAt}
		for i, a := range rec.Attempts {
			times[fmt.Sprintf("attempts[%d].start", i)] = a.Start
		}
		if len(rec.Attempts) == 0 {
			t.Errorf("no attempts journaled: %s", raw)
		}
		for field, v := range times {
			if !apiTimeRE.MatchString(v) {
				t.Errorf("%s %q is not RFC 3339 UTC to the millisecond", field, v)
			}
		}
		// Compared as times: JSON drops trailing zeros (".28Z" is 280 ms,
		// which a string comparison puts after ".289Z").
		first, _ := time.Parse(time.RFC3339Nano, rec.FirstSeen)
		last, _ := time.Parse(time.RFC3339Nano, rec.LastSeen)
		if !last.After(first) {
			t.Errorf("last_seen %s is not after first_seen %s", rec.LastSeen, rec.FirstSeen)
		}
	})
}
