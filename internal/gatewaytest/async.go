package gatewaytest

import (
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// AsyncBackend is the backend behind `deliver async`: it counts runs per
// key (the form's out_trade_no), deliveries in flight at once, and when
// each started.
type AsyncBackend struct {
	t  testing.TB
	ln net.Listener

	mu          sync.Mutex
	hits        map[string]int
	attempts    map[string][]string // Idemgate-Delivery-Attempt per run
	uris        map[string]string   // the request URI of the last run
	starts      []time.Time
	inFlight    int
	maxInFlight int
	delay       time.Duration
	// answer decides the n-th (1-based) run's answer; default 200 "ok <key>".
	answer func(key string, n int) (int, string)
	// cut, when it says so, closes the connection after reading the
	// request, before any answer: the request reached the backend.
	cut     func(key string, n int) bool
	arrived chan string
}

// NewAsyncBackend listens on addr ("127.0.0.1:0" for any port).
func NewAsyncBackend(t testing.TB, addr string) *AsyncBackend {
	b := &AsyncBackend{t: t, hits: map[string]int{}, attempts: map[string][]string{}, uris: map[string]string{},
		arrived: make(chan string, 100000)}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b.ln = ln
	srv := &http.Server{Handler: b}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

// Addr is the backend's host:port.
func (b *AsyncBackend) Addr() string { return b.ln.Addr().String() }

func (b *AsyncBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	v, _ := url.ParseQuery(string(body))
	key := v.Get("out_trade_no")
	b.mu.Lock()
	b.hits[key]++
	n := b.hits[key]
	b.attempts[key] = append(b.attempts[key], r.Header.Get("Idemgate-Delivery-Attempt"))
	b.uris[key] = r.RequestURI
	b.starts = append(b.starts, arrived)
	b.inFlight++
	b.maxInFlight = max(b.maxInFlight, b.inFlight)
	delay, answer, cut := b.delay, b.answer, b.cut
	b.mu.Unlock()
	b.arrived <- key
	if cut != nil && cut(key, n) {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
		return
	}
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	status, text := 200, "ok "+key
	if answer != nil {
		status, text = answer(key, n)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// Count is how often key ran.
func (b *AsyncBackend) Count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[key]
}

// Total is how many runs there were, of every key.
func (b *AsyncBackend) Total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.hits {
		n += c
	}
	return n
}

// Hits are the runs per key so far.
func (b *AsyncBackend) Hits() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.hits)
}

// Attempts are the Idemgate-Delivery-Attempt headers of key's runs.
func (b *AsyncBackend) Attempts(key string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.attempts[key])
}

// URI is the request URI of key's last run.
func (b *AsyncBackend) URI(key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.uris[key]
}

// Starts are when each run started, in order.
func (b *AsyncBackend) Starts() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.starts)
}

// MaxInFlight is the most runs there were at once.
func (b *AsyncBackend) MaxInFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxInFlight
}

// Arrived gets each run's key as it arrives.
func (b *AsyncBackend) Arrived() <-chan string { return b.arrived }

// SetDelay makes each run take d before its answer.
func (b *AsyncBackend) SetDelay(d time.Duration) {
	b.mu.Lock()
	b.delay = d
	b.mu.Unlock()
}

// SetAnswer decides the n-th (1-based) run's answer (default 200 "ok <key>").
func (b *AsyncBackend) SetAnswer(f func(key string, n int) (int, string)) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}

// SetCut, when f says so, closes the connection after reading the
// request, before any answer: the request reached the backend.
func (b *AsyncBackend) SetCut(f func(key string, n int) bool) {
	b.mu.Lock()
	b.cut = f
	b.mu.Unlock()
}

// Percentiles returns the median and the maximum of ds.
func Percentiles(ds []time.Duration) (p50, top time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
