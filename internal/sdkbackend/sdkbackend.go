// Package sdkbackend is a merchant's backend as merchants write them: every
// notification it receives is verified with the platform's own SDK
// (stripe-go, wechatpay-go, smartwalle/alipay, go-pay/gopay, the Standard
// Webhooks library) before the business runs. Tests put it behind the
// gateway to prove that what the gateway forwards, delivers and redelivers
// is what the platform's own code accepts, and how many times the business
// ran for each business event.
//
// Test support: only tests import it, so the SDKs stay out of the shipped
// binary.
package sdkbackend

import (
	"io"
	"net/http"
	"sort"
	"sync"
)

// Backend verifies each request with one platform's SDK, runs the
// business (counts it) once per accepted request, and answers what that
// platform expects of a merchant.
type Backend struct {
	verify  func(r *http.Request, body []byte) (event string, err error)
	success func(w http.ResponseWriter)
	failure func(w http.ResponseWriter, err error)
	// page, when set, answers a browser's GET instead of success (the
	// shop's result page).
	page func(w http.ResponseWriter, event string)

	mu       sync.Mutex
	runs     map[string]int // business event → times the SDK accepted it
	refusals []string       // why the SDK refused, in order
	attempts int            // requests received, down or not
	down     bool
}

// ServeHTTP verifies r with the SDK. While Down is set it answers 503
// without reading anything, as a backend behind a failing deploy does.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.attempts++
	down := b.down
	b.mu.Unlock()
	if down {
		http.Error(w, "backend down", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		b.refuse(w, err)
		return
	}
	event, err := b.verify(r, body)
	if err != nil {
		b.refuse(w, err)
		return
	}
	b.mu.Lock()
	b.runs[event]++
	b.mu.Unlock()
	if b.page != nil && r.Method == http.MethodGet {
		b.page(w, event)
		return
	}
	b.success(w)
}

func (b *Backend) refuse(w http.ResponseWriter, err error) {
	b.mu.Lock()
	b.refusals = append(b.refusals, err.Error())
	b.mu.Unlock()
	b.failure(w, err)
}

// SetDown makes the backend answer 503 to everything (true) or verify
// again (false).
func (b *Backend) SetDown(down bool) {
	b.mu.Lock()
	b.down = down
	b.mu.Unlock()
}

// Runs is how many times the business ran for event (see each
// constructor for how it names events).
func (b *Backend) Runs(event string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[event]
}

// Events lists every event that ran, sorted.
func (b *Backend) Events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.runs))
	for e := range b.runs {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// Total is how many times the business ran, all events together.
func (b *Backend) Total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.runs {
		n += c
	}
	return n
}

// Refusals lists why the SDK refused requests, oldest first.
func (b *Backend) Refusals() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.refusals...)
}

// Attempts is how many requests reached the backend, refused and down
// ones included.
func (b *Backend) Attempts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.attempts
}

func newBackend(verify func(*http.Request, []byte) (string, error),
	success func(http.ResponseWriter), failure func(http.ResponseWriter, error),
) *Backend {
	return &Backend{verify: verify, success: success, failure: failure, runs: map[string]int{}}
}
