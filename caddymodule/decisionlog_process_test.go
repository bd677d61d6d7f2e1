package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestDecisionLinesAtStopAndReload: no decision line is lost when the
// config is reloaded or the process stops gracefully right after its last
// answer, with lines still queued behind a slow log: the log is a named
// pipe (a plain file to Caddy, not rolled) that the test stops reading
// during each burst, so the route's writer blocks and most of the burst's
// lines wait in its queue when the reload (SIGUSR1, the same config) or
// the stop (SIGINT) comes. The pipe must then carry exactly one decision
// line per notification answered.
func TestDecisionLinesAtStopAndReload(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	be := newBackend(t)
	fifo := filepath.Join(t.TempDir(), "decisions.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	log := newSlowReader(t, fifo)
	// The route's lines have a log of their own: Caddy's own lines, its
	// stop's among them, do not wait for the pipe.
	globals := fmt.Sprintf(`	log {
		format json
		exclude http.handlers.idempotency
	}
	log decisions {
		output file %s {
			roll_disabled
		}
		format json
		level INFO
		include http.handlers.idempotency
	}`, fifo)
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store memory
	}
	reverse_proxy %s`, be.addr())
	p := startProcWith(t, t.TempDir(), globals, site)

	// A burst's lines are ~4 times the pipe's 64 KiB and well within the
	// queue: the answers do not wait for the log.
	const burst = 1000
	sent := 0
	send := func(phase string) {
		t.Helper()
		replies := storm(t, burst, func(i int) reply { return notify(t, p.base, fmt.Sprintf("%s-%d", phase, i)) })
		for i, r := range replies {
			if r.status != 200 {
				t.Fatalf("%s-%d: %d %q", phase, i, r.status, r.body)
			}
		}
		sent += burst
	}
	// The test reads again well after the signal: the reload or the stop
	// has then cleaned the routes up, or is waiting for them.
	signal := func(sig os.Signal) {
		t.Helper()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		log.release()
	}

	log.hold()
	send("before-reload")
	signal(syscall.SIGUSR1)
	eventually(t, 20*time.Second, "the reload", func() bool {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), "successfully reloaded config from file")
	})
	client.CloseIdleConnections() // the old server closed them: a POST on one would fail
	log.hold()
	send("before-stop")
	signal(syscall.SIGINT) // a second SIGINT (p.stop) would force the exit
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the gateway did not stop gracefully: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway did not stop")
	}
	select {
	case <-log.eof:
	case <-time.After(10 * time.Second):
		t.Fatal("the log pipe was not closed by the gateway's exit")
	}

	out := log.String()
	lines, keys := 0, make(map[string]bool)
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, `"msg":"idempotency decision"`) {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("decision line %q: %v", l, err)
		}
		if e["outcome"] != "forwarded" {
			t.Fatalf("decision line %q, want outcome forwarded", l)
		}
		lines++
		keys[fmt.Sprint(e["key"])] = true
	}
	if lines != sent || len(keys) != sent {
		t.Fatalf("%d decision lines for %d keys in the log, want one for each of the %d notifications answered",
			lines, len(keys), sent)
	}
	if procOut, _ := os.ReadFile(p.log); strings.Contains(out+string(procOut), "already closed") {
		t.Errorf("a line was written to a closed log:\n%s", procOut)
	}
}

// slowReader reads a named pipe to its end, except while held.
type slowReader struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	gate chan struct{} // closed: reading
	eof  chan struct{}
}

func newSlowReader(t *testing.T, path string) *slowReader {
	r := &slowReader{gate: make(chan struct{}), eof: make(chan struct{})}
	close(r.gate)
	go func() {
		defer close(r.eof)
		f, err := os.Open(path) // waits for the gateway to open it
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		b := make([]byte, 4096)
		for {
			r.mu.Lock()
			gate := r.gate
			r.mu.Unlock()
			<-gate
			n, err := f.Read(b)
			r.mu.Lock()
			r.buf.Write(b[:n])
			r.mu.Unlock()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return r
}

func (r *slowReader) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = make(chan struct{})
}

func (r *slowReader) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.gate:
	default:
		close(r.gate)
	}
}

func (r *slowReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}
