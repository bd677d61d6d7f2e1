package loadfloor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
)

// TestFloor runs the floor in a real Caddy in front of a real backend and
// redis-server: every request reaches the backend once, its body intact,
// and costs Redis exactly two script calls (the floor load.sh measures
// is two round trips, no more and no fewer), 64 at once (shared
// batches), and on the direct path; with work, each script
// runs that many commands; a body over the bound is a 413 that reaches
// neither.
func TestFloor(t *testing.T) {
	rs := redistest.Start(t)
	for _, mode := range []string{"", " direct", " work 7"} {
		t.Run("path"+strings.ReplaceAll(mode, " ", "="), func(t *testing.T) {
			be := gatewaytest.NewBackend(t)
			base := gatewaytest.StartCaddy(t, `
	idempotency_floor REDIS`+mode+`
	reverse_proxy BACKEND`, "REDIS", rs.Addr(), "BACKEND", be.Addr())
			before, beforeWork := rs.ScriptCalls(), rs.CommandCalls("exists")
			const n = 64
			replies := gatewaytest.Storm(n, func(i int) gatewaytest.Reply {
				return gatewaytest.Notify(t, base, fmt.Sprintf("f-%d", i))
			})
			for i, rep := range replies {
				if want := fmt.Sprintf("ok f-%d", i); rep.Status != 200 || rep.Body != want {
					t.Errorf("request %d: %d %q, want 200 %q", i, rep.Status, rep.Body, want)
				}
			}
			if got := be.Total.Load(); got != n {
				t.Errorf("backend ran %d times for %d requests", got, n)
			}
			if got := rs.ScriptCalls() - before; got != int64(2*n) {
				t.Errorf("%d script calls for %d requests, want %d", got, n, 2*n)
			}
			work := int64(0)
			if mode == " work 7" {
				work = 2 * n * 7
			}
			if got := rs.CommandCalls("exists") - beforeWork; got != work {
				t.Errorf("the scripts ran %d commands for %d requests, want %d", got, n, work)
			}

			// A body over the bound is refused before Redis and the backend.
			before = rs.ScriptCalls()
			big := gatewaytest.Post(t, base+"/notify", "text/plain", strings.Repeat("x", maxBody+1), nil)
			if big.Status != 413 {
				t.Errorf("a body of %d bytes: %d %q, want 413", maxBody+1, big.Status, big.Body)
			}
			if got := be.Total.Load(); got != n {
				t.Errorf("backend ran %d times after the refused body, want %d", got, n)
			}
			if got := rs.ScriptCalls() - before; got != 0 {
				t.Errorf("%d script calls for the refused body", got)
			}
		})
	}
}
