package caddymodule

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The handler's tests run the real module in this process through
// internal/gatewaytest, which the admin API's, the console's and the CLI's
// tests share. These are its helpers under the names this package's tests
// have always used.

// raceDetector: this test binary runs under -race, several times slower.
const raceDetector = testenv.Race

// backend is the stand-in legacy backend (gatewaytest.Backend).
type backend struct{ *gatewaytest.Backend }

func newBackend(t testing.TB) *backend { return newBackendAt(t, "127.0.0.1:0") }

// newBackendAt starts the backend on addr.
func newBackendAt(t testing.TB, addr string) *backend {
	return &backend{gatewaytest.NewBackendAt(t, addr)}
}

func (b *backend) addr() string           { return b.Addr() }
func (b *backend) count(order string) int { return b.Count(order) }
func (b *backend) totalHits() int64       { return b.Total.Load() }
func (b *backend) setAnswer(f func(order string, n int, r *http.Request) (int, string, time.Duration)) {
	b.SetAnswer(f)
}

func freePort(t testing.TB) int { return gatewaytest.FreePort(t) }

// caddyGlobals are a test config's global options.
type caddyGlobals struct {
	admin string // the admin endpoint; "" turns it off
	log   string // the body of the log block; "" logs errors only
}

// startCaddy runs the real module in this process (gatewaytest.StartCaddy)
// and returns the gateway's base URL.
func startCaddy(t testing.TB, siteBody string, replacements ...string) string {
	t.Helper()
	return gatewaytest.StartCaddy(t, siteBody, replacements...)
}

// startCaddyWith is startCaddy with other global options.
func startCaddyWith(t testing.TB, g caddyGlobals, siteBody string, replacements ...string) string {
	t.Helper()
	return gatewaytest.StartCaddyWith(t, gatewaytest.Globals{Admin: g.admin, Log: g.log}, siteBody, replacements...)
}

func loadCaddyfile(t testing.TB, cf string)                     { t.Helper(); gatewaytest.LoadCaddyfile(t, cf) }
func waitListening(t testing.TB, base string)                   { t.Helper(); gatewaytest.WaitListening(t, base) }
func waitServing(t testing.TB, base string)                     { t.Helper(); gatewaytest.WaitServing(t, base) }
func reservePort(t testing.TB) string                           { return gatewaytest.ReservePort(t) }
func mustJSON(v any) string                                     { return gatewaytest.MustJSON(v) }
func itoa(i int) string                                         { return strconv.Itoa(i) }
func keyURI(key string) string                                  { return gatewaytest.KeyURI(key) }
func storm(_ testing.TB, n int, send func(i int) reply) []reply { return gatewaytest.Storm(n, send) }
func runningApp(t testing.TB) *app.App                          { t.Helper(); return gatewaytest.App(t) }

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	gatewaytest.Eventually(t, within, what, cond)
}

// gateway is a running in-process gateway with its admin endpoint on.
type gateway struct {
	base  string // the site, http://127.0.0.1:port
	admin string // the admin endpoint, 127.0.0.1:port
}

// startGateway is startCaddy with the admin endpoint on a free loopback
// port: the admin API, the CLI and /metrics are reached through it.
func startGateway(t testing.TB, siteBody string, replacements ...string) gateway {
	t.Helper()
	g := gatewaytest.StartGateway(t, siteBody, replacements...)
	return gateway{base: g.Base, admin: g.Admin}
}

func (g gateway) of() gatewaytest.Gateway { return gatewaytest.Gateway{Base: g.base, Admin: g.admin} }

// adminDo sends one request to the admin endpoint as curl would.
func (g gateway) adminDo(t testing.TB, method, uri string) (int, string) {
	t.Helper()
	return g.of().AdminDo(t, method, uri)
}

// waitReloaded waits, after a config load, until the site and the admin
// endpoint (which a load restarts) both answer.
func (g gateway) waitReloaded(t testing.TB) {
	t.Helper()
	g.of().WaitReloaded(t)
}

// adminJSON is adminDo decoding a 200 answer into v.
func (g gateway) adminJSON(t testing.TB, method, uri string, v any) {
	t.Helper()
	g.of().AdminJSON(t, method, uri, v)
}

// reply is what a client got.
type reply struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

func replyOf(r gatewaytest.Reply) reply {
	return reply{status: r.Status, body: r.Body, header: r.Header, replayed: r.Replayed}
}

var client = gatewaytest.Client

// notify posts a form notification for order.
func notify(t testing.TB, base, order string, extra ...string) reply {
	t.Helper()
	return replyOf(gatewaytest.Notify(t, base, order, extra...))
}

func post(t testing.TB, u, ctype, body string, hdr http.Header) reply {
	t.Helper()
	return replyOf(gatewaytest.Post(t, u, ctype, body, hdr))
}
