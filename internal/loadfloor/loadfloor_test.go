package loadfloor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
)

// TestFloor runs the floor in a real Caddy in front of a real backend and
// redis-server: every request reaches the backend once, its body intact,
// and costs Redis exactly two script calls (the floor load.sh measures
// is two round trips, no more and no fewer), alone and with 16 at once
// (the autopipeliner's path), and on the direct path.
func TestFloor(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	ctx := context.Background()
	scripts := func() int {
		t.Helper()
		info, err := rc.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
		}
		return n
	}
	for _, mode := range []string{"", " direct"} {
		t.Run("path"+strings.ReplaceAll(mode, " ", "="), func(t *testing.T) {
			be := gatewaytest.NewBackend(t)
			base := gatewaytest.StartCaddy(t, `
	idempotency_floor REDIS`+mode+`
	reverse_proxy BACKEND`, "REDIS", rs.Addr(), "BACKEND", be.Addr())
			before := scripts()
			const n = 64
			var wg sync.WaitGroup
			errs := make(chan error, n)
			sem := make(chan struct{}, 16)
			for i := range n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					order := fmt.Sprintf("f-%d", i)
					rep := gatewaytest.Notify(t, base, order)
					if rep.Status != 200 || rep.Body != "ok "+order {
						errs <- fmt.Errorf("%s: %d %q", order, rep.Status, rep.Body)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := be.Total.Load(); got != n {
				t.Errorf("backend ran %d times for %d requests", got, n)
			}
			if got := scripts() - before; got != 2*n {
				t.Errorf("%d script calls for %d requests, want %d", got, n, 2*n)
			}
		})
	}
}
