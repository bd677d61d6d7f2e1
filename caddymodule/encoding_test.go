package caddymodule

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// encode compresses b as enc names it.
func encode(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	case "br":
		w = brotli.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("no encoder for %s", enc)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// encodingBackend answers every notification with the body its form's
// answer field names ("success", "fail", or "bomb": 8 MiB of "success"),
// encoded as the request's Accept-Encoding asks, and counts each order.
type encodingBackend struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	hits map[string]int
	sent map[string][]byte // order → the last bytes sent
}

func newEncodingBackend(t *testing.T) *encodingBackend {
	b := &encodingBackend{t: t, hits: map[string]int{}, sent: map[string][]byte{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	srv := &http.Server{Handler: b}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *encodingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	f, _ := url.ParseQuery(string(raw))
	plain := []byte(f.Get("answer"))
	if f.Get("answer") == "bomb" {
		plain = bytes.Repeat([]byte("success "), 1<<20)
	}
	enc := r.Header.Get("Accept-Encoding")
	out := plain
	if enc != "" {
		out = encode(b.t, enc, plain)
		w.Header().Set("Content-Encoding", enc)
		w.Header().Set("Vary", "Accept-Encoding")
	}
	b.mu.Lock()
	b.hits[f.Get("out_trade_no")]++
	b.sent[f.Get("out_trade_no")] = out
	b.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	w.Write(out)
}

func (b *encodingBackend) count(order string) (int, []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[order], b.sent[order]
}

// TestFaultEncodedAnswers: the platform sends Accept-Encoding and the
// backend compresses its answer. A body-reading success rule (`success
// 200 body success`, as Alipay's) judges the decoded body: an encoded
// "success" is remembered, its duplicate replayed byte for byte with the
// backend's Content-Encoding, and the backend runs once; an encoded
// "fail" is still a failure (released: the retry runs); a body that
// decodes past max_answer is not read whole, and judged a failure.
func TestFaultEncodedAnswers(t *testing.T) {
	be := newEncodingBackend(t)
	base := startCaddy(t, `
	idempotency {
		key demo:{idempotency.form.out_trade_no}
		success 200 body success
		store memory
	}
	reverse_proxy `+be.addr)
	send := func(order, answer, enc string) reply {
		t.Helper()
		r, err := faultSend(client, http.MethodPost, base, "out_trade_no="+order+"&answer="+answer,
			http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Accept-Encoding": {enc}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, enc := range []string{"gzip", "deflate", "br", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			order := "enc-ok-" + enc
			first := send(order, "success", enc)
			_, sent := be.count(order)
			if first.status != 200 || first.body != string(sent) || first.header.Get("Content-Encoding") != enc {
				t.Fatalf("first copy: %d %q %q", first.status, first.body, first.header.Get("Content-Encoding"))
			}
			second := send(order, "success", enc)
			if !second.replayed || second.body != string(sent) || second.header.Get("Content-Encoding") != enc {
				t.Fatalf("duplicate: replayed=%v body %q enc %q, want the backend's %d encoded bytes",
					second.replayed, second.body, second.header.Get("Content-Encoding"), len(sent))
			}
			if n, _ := be.count(order); n != 1 {
				t.Fatalf("backend ran %d times, want 1", n)
			}

			order = "enc-fail-" + enc
			send(order, "fail", enc)
			if r := send(order, "fail", enc); r.replayed {
				t.Fatal("an encoded failure was remembered")
			}
			if n, _ := be.count(order); n != 2 {
				t.Fatalf("backend ran %d times for a failure and its retry, want 2", n)
			}
		})
	}
	t.Run("past max_answer", func(t *testing.T) {
		send("enc-bomb", "bomb", "gzip")
		if r := send("enc-bomb", "bomb", "gzip"); r.replayed {
			t.Fatal("an answer that decodes past max_answer was judged a success")
		}
		if n, _ := be.count("enc-bomb"); n != 2 {
			t.Fatalf("backend ran %d times, want 2", n)
		}
	})
}
