package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/headers"
	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/store"
)

// replay writes a remembered answer, or the route's on_duplicate action.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, rec *store.Record) error {
	if a := h.OnDuplicate; a != nil {
		if a.Redirect != "" {
			loc := repl.ReplaceAll(a.Redirect, "")
			// Validate refuses a template whose scheme or host the
			// request could choose; this holds it to that (redirect.go).
			if fixed, err := redirectOrigin(a.Redirect); err != nil || !strings.HasPrefix(loc, fixed) {
				h.logger.Error("on_duplicate redirect refused: the rendered Location leaves the template's origin",
					zap.String("template", a.Redirect))
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusBadRequest)
				_, err := io.WriteString(w, "400 redirect target refused\n")
				return err
			}
			w.Header().Set("Location", loc)
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusFound)
			return nil
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(a.Status)
		_, err := io.WriteString(w, repl.ReplaceKnown(a.Body, ""))
		return err
	}
	// A duplicate gets an answer its platform takes: its own, or the ack.
	if !orders.AcceptsAnswer(h.success.judge, r.Method, rec) {
		return writeAck(w, r, h.platformAck(), true)
	}
	hdr := w.Header()
	for k, v := range rec.Header {
		hdr[k] = append([]string(nil), v...)
	}
	hdr.Set("Idempotent-Replayed", "true")
	if rec.BodyCached {
		hdr.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	if r.Method == http.MethodHead || !rec.BodyCached {
		return nil
	}
	_, err := w.Write(rec.Body)
	return err
}

// replayHeaders keeps the headers that are safe to send again to another
// copy: not hop-by-hop, not per-response (Date), not cookies.
func replayHeaders(h http.Header) http.Header {
	return headers.CloneWithout(h, notReplayed)
}

func notReplayed(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Trailer",
		"Te", "Date", "Set-Cookie", "Content-Length", "Idempotent-Replayed", "Alt-Svc":
		return true
	}
	return false
}

// teeWriter passes the backend's answer through to the client as it comes
// and keeps a copy (status, header snapshot, body up to limit) to remember.
// It holds the forward's send trace too: one allocation for the three.
type teeWriter struct {
	caddyhttp.ResponseWriterWrapper
	sent        gate.SendTrace
	status      int
	header      http.Header
	wroteHeader bool
	buf         *bytes.Buffer
	limit       int
	overflow    bool
	clientErr   error // the first failed write to the client
}

var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func newTeeWriter(w http.ResponseWriter, limit int) *teeWriter {
	buf := answerBufs.Get().(*bytes.Buffer)
	buf.Reset()
	return &teeWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, buf: buf, limit: limit}
}

// release returns the body buffer to the pool; the tee is not used after.
func (t *teeWriter) release() {
	if t.buf != nil && t.buf.Cap() <= 64<<10 {
		answerBufs.Put(t.buf)
	}
	t.buf = nil
}

// statusCode is the answer's status (200 when the handler wrote none).
func (t *teeWriter) statusCode() int {
	if !t.wroteHeader {
		return http.StatusOK
	}
	return t.status
}

func (t *teeWriter) WriteHeader(status int) {
	if t.wroteHeader {
		return
	}
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		t.ResponseWriterWrapper.WriteHeader(status)
		return
	}
	t.wroteHeader = true
	t.status = status
	// The header map is live: copy it before the next handler or the
	// server changes it; only what a replay sends is kept.
	t.header = replayHeaders(t.Header())
	t.ResponseWriterWrapper.WriteHeader(status)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	if !t.overflow {
		if t.buf.Len()+len(p) > t.limit {
			t.overflow = true
			t.buf.Reset()
		} else {
			t.buf.Write(p)
		}
	}
	// A client that went away must not stop the copy: the backend's whole
	// answer is still read, so it can be remembered and replayed to the
	// platform's retry.
	if t.clientErr == nil {
		if _, err := t.ResponseWriterWrapper.Write(p); err != nil {
			t.clientErr = err
		}
	}
	return len(p), nil
}

// ReadFrom must go through Write, or the wrapper's ReadFrom would send the
// body past the copy.
func (t *teeWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{t}, r)
}

type writerOnly struct{ io.Writer }

var _ io.ReaderFrom = (*teeWriter)(nil)

// DuplicateAction is what duplicates on a route get instead of the replay:
// a redirect (a browser return page) or a fixed answer.
type DuplicateAction struct {
	// Redirect is a URL template; duplicates get 302 to it.
	Redirect string `json:"redirect,omitempty"`
	// Status and Body are a fixed answer.
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
}
