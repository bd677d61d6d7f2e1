package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/cache"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
)

// rejection is a request refused before any key is claimed: its answer
// status, its outcome and why (err, for the log; msg, for the sender,
// when err may hold what the sender must not see).
type rejection struct {
	status  int
	outcome outcome
	err     error
	msg     string
}

// public is what the sender is told (refusal.go).
func (rej *rejection) public() string {
	switch {
	case rej.msg != "":
		return rej.msg
	case rej.outcome == outcomeRejectedSignature:
		// Which check failed helps a forger more than the platform.
		return msgSignature
	}
	return publicLine(rej.err)
}

// notice is what a verified notification brings besides its key and
// fingerprint: what its key's order remembers once it ran.
type notice struct {
	run   *cache.OrderRun // nil: the key is not an order's business event here
	keyID string          // the key or certificate that verified it, if named
}

// parse reads the body, verifies the signature and renders the key and
// fingerprint; nt.keyID names the key that verified it. A rejected request
// touches no key.
func (h *Handler) parse(r *http.Request, repl *caddy.Replacer) (key, fp string, nt notice, rej *rejection) {
	body, rej := h.readBody(r)
	if rej != nil {
		return "", "", nt, rej
	}
	at := h.verifyTime(r)
	kr := &keying.Request{Method: r.Method, URL: r.URL, Header: r.Header, Body: body, Now: at, Context: r.Context()}
	n, err := h.platform.Verify(kr)
	switch {
	case errors.Is(err, keying.ErrUnavailable):
		// The check needs the store (PayPal's transmission log).
		return "", "", nt, &rejection{http.StatusServiceUnavailable, outcomeStoreError, err, msgStore}
	case errors.Is(err, keying.ErrSignature):
		return "", "", nt, &rejection{http.StatusUnauthorized, outcomeRejectedSignature, err, msgSignature}
	case err != nil:
		return "", "", nt, &rejection{http.StatusBadRequest, outcomeBadRequest, err, ""}
	}
	if h.Platform != platforms.Default && !h.VerifyOff {
		var label string
		nt.keyID, label = h.verifiedBy(kr)
		h.metrics.verifiedWith(r.Context(), h.route(), label)
	}
	if n.Order != "" {
		repl.Set("idempotency.order", n.Order)
		repl.Set("idempotency.event", n.Event)
	}
	bp := &bodyPlaceholders{n: n, platform: h.Platform, req: r}
	repl.Map(bp.get)
	if key, err = h.renderKey(repl, bp, n); err != nil {
		return "", "", nt, &rejection{http.StatusBadRequest, outcomeBadRequest, err, ""}
	}
	repl.Set("idempotency.key", key)
	if fp, err = h.renderFingerprint(repl, bp, n, body); err != nil {
		return key, "", nt, &rejection{http.StatusBadRequest, outcomeBadRequest, err, ""}
	}
	keyID := nt.keyID
	nt = h.noticeOf(key, n)
	nt.keyID = keyID
	return key, fp, nt, nil
}

// readBody reads the whole request body, bounded by max_body, and puts the
// same bytes back for the backend.
func (h *Handler) readBody(r *http.Request) ([]byte, *rejection) {
	tooLarge := func(err error) *rejection {
		return &rejection{http.StatusRequestEntityTooLarge, outcomeTooLarge, err,
			fmt.Sprintf("body larger than max_body (%d bytes)", h.MaxBody)}
	}
	if r.ContentLength > h.MaxBody {
		return nil, tooLarge(fmt.Errorf("body of %d bytes is larger than max_body %d", r.ContentLength, h.MaxBody))
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := readAll(io.LimitReader(r.Body, h.MaxBody+1), r.ContentLength)
	if err != nil {
		return nil, &rejection{http.StatusBadRequest, outcomeBadRequest, fmt.Errorf("reading body: %v", err), msgReadingBody}
	}
	if int64(len(body)) > h.MaxBody {
		return nil, tooLarge(fmt.Errorf("body is larger than max_body %d", h.MaxBody))
	}
	r.Body = &readBodyCloser{Reader: bytes.NewReader(body), body: body}
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return body, nil
}

// readAll reads rd to its end into a buffer of the declared size (plus
// one byte, to see a body longer than declared), or, with none declared
// (size < 0), as io.ReadAll does. bytes.Buffer.ReadFrom wants 512 bytes
// free before every read: a 60-byte form cost 4.5 KiB of allocations.
func readAll(rd io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(rd)
	}
	b := make([]byte, size+1)
	n, err := io.ReadFull(rd, b)
	switch err {
	case nil: // longer than declared
		rest, err := io.ReadAll(rd)
		return append(b, rest...), err
	case io.EOF, io.ErrUnexpectedEOF: // as declared, or shorter
		return b[:n], nil
	}
	return nil, err
}

// readBodyCloser is a request body readBody has read: what the backend
// reads, and the bytes themselves for the journal, which need no second
// copy.
type readBodyCloser struct {
	*bytes.Reader
	body []byte
}

func (*readBodyCloser) Close() error { return nil }

// maxKeyLen bounds a rendered key; stores put it in their own keys.
const maxKeyLen = 1024

// renderKey renders the key template, or takes the preset's default, and
// puts the route's scope in front: the full key.
// Every placeholder of a template must render non-empty: a missing order
// id must not collapse distinct notifications onto one key.
func (h *Handler) renderKey(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification) (string, error) {
	key := n.Key
	if h.Key != "" {
		var empty []string
		out, err := repl.ReplaceFunc(h.Key, func(name string, val any) (any, error) {
			if caddy.ToString(val) == "" {
				empty = append(empty, "{"+name+"}")
			}
			return val, bp.ambiguous(name)
		})
		if err != nil {
			return "", fmt.Errorf("key: %w", err)
		}
		if bp.err != nil {
			return "", fmt.Errorf("key: %w", bp.err)
		}
		if len(empty) > 0 {
			return "", fmt.Errorf("key: %s is empty", strings.Join(empty, ", "))
		}
		key = out
	}
	if strings.TrimSpace(key) == "" {
		return "", errors.New("no idempotency key in this request")
	}
	key = h.fullKey(key)
	if len(key) > maxKeyLen {
		return "", fmt.Errorf("key is longer than %d bytes", maxKeyLen)
	}
	if strings.ContainsFunc(key, unicode.IsControl) {
		// A key is shown to operators (CLI, console, logs with log_keys):
		// terminal escapes in it would steer their screens. No platform
		// names an order with control characters.
		return "", errors.New("key holds control characters")
	}
	return key, nil
}

// renderFingerprint returns the digest of the fingerprint material, "" when off.
func (h *Handler) renderFingerprint(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification, body []byte) (string, error) {
	switch h.Fingerprint {
	case "off":
		return "", nil
	case "":
		if h.bodyKeyed {
			return "", nil
		}
		m := n.FingerprintOf(body)
		if m == "" {
			return "", nil
		}
		return keying.Digest([]byte(m)), nil
	}
	out, err := repl.ReplaceFunc(h.Fingerprint, func(name string, val any) (any, error) {
		return val, bp.ambiguous(name)
	})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	if bp.err != nil {
		return "", fmt.Errorf("fingerprint: %w", bp.err)
	}
	return keying.Digest([]byte(out)), nil
}

// bodyPlaceholders serves {idempotency.json.*}, {idempotency.form.*},
// {idempotency.xml.*} and {idempotency.<platform>.*} from the verified
// notification, and remembers a parse failure so the 400 can say why.
type bodyPlaceholders struct {
	n        *keying.Notification
	platform string
	req      *http.Request
	err      error
}

// ambiguous refuses a template's header, query or form field that the
// request carries more than once: Caddy joins a repeated header's values
// with "," and takes a query or form field's first value, while the
// backend may read the first, the last or all of them — another key than
// the gateway claimed, and the backend runs twice. (Presets read their
// signed fields strictly, keying.ErrAmbiguous.)
func (bp *bodyPlaceholders) ambiguous(name string) error {
	var what string
	var n int
	switch {
	case strings.HasPrefix(name, "http.request.header."):
		what = "header " + strings.TrimPrefix(name, "http.request.header.")
		n = len(bp.req.Header.Values(strings.TrimPrefix(name, "http.request.header.")))
	case strings.HasPrefix(name, "http.request.uri.query."):
		what = "query field " + strings.TrimPrefix(name, "http.request.uri.query.")
		n = len(bp.req.URL.Query()[strings.TrimPrefix(name, "http.request.uri.query.")])
	case strings.HasPrefix(name, "idempotency.form."):
		what = "form field " + strings.TrimPrefix(name, "idempotency.form.")
		n = bp.n.Fields.FormCount(strings.TrimPrefix(name, "idempotency.form."))
	}
	if n > 1 {
		return fmt.Errorf("%s appears %d times in this request: a backend may read another value than the gateway keys on", what, n)
	}
	return nil
}

func (bp *bodyPlaceholders) get(name string) (any, bool) {
	rest, ok := strings.CutPrefix(name, "idempotency.")
	if !ok {
		return nil, false
	}
	kind, path, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	var (
		val string
		err error
	)
	switch kind {
	case "json":
		val, ok, err = bp.n.Fields.JSON(path)
	case "form":
		val, ok, err = bp.n.Fields.Form(path)
	case "xml":
		val, ok, err = bp.n.Fields.XML(path)
	default:
		if kind != bp.platform || bp.n.Extra == nil {
			return nil, false
		}
		val, ok = bp.n.Extra(path)
	}
	if err != nil && bp.err == nil {
		bp.err = err
	}
	return val, ok
}
