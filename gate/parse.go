package gate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// parsed is a verified notification: its key and fingerprint, and what
// its order remembers once it ran.
type parsed struct {
	key, fp         string
	keyID, verified string
	run             *store.OrderRun
	body            []byte   // as read (Claim.Body)
	refs            []string // the merchant's references (Claim.MerchantRefs)
}

// parse reads the body, verifies the signature and renders the key and
// fingerprint. A refused request (ok false) touches no key; the outcome
// names the key when it was rendered.
func (g *Gate) parse(r *http.Request) (p parsed, refused Outcome, ok bool) {
	body, refused, ok := g.readBody(r)
	if !ok {
		return p, refused, false
	}
	kr := &keying.Request{Method: r.Method, URL: r.URL, Header: r.Header, Body: body,
		Now: g.Route.VerifyTime(r), Context: r.Context()}
	n, err := g.Platform.Verify(kr)
	defer func() {
		if !ok && refused.Action == Refuse {
			refused.Body = body
		}
	}()
	switch {
	case err == nil:
		// Verified. (First: the cases below would make the target of
		// their errors.As, an allocation, for every notification.)
	case errors.Is(err, keying.ErrUnavailable):
		// The check needed the store (PayPal's transmission log):
		// whatever on_store_error says, a notification that could not be
		// verified is never forwarded.
		return p, StoreFailure("verify", err, fmt.Errorf("verifying the notification: %w", err)), false
	case errors.Is(err, keying.ErrMerchant):
		// Signed, but for a merchant the route does not accept (app_id,
		// mchid): 403, authenticated but not accepted, so nobody chases a
		// key rotation. Which merchant was named is in the log.
		return p, refuse(RejectedMerchant, http.StatusForbidden, MsgMerchant, err), false
	case errors.Is(err, keying.ErrSignature):
		// Which check failed helps a forger more than the platform.
		return p, refuse(RejectedSignature, http.StatusUnauthorized, MsgSignature, err), false
	case errors.As(err, new(*keying.ChannelError)):
		// Verified, but by a channel this route does not take (Alipay's
		// return without `return business` or `return display`): the
		// short line names the settings, the log has the whole reason.
		var ce *keying.ChannelError
		errors.As(err, &ce)
		o := refuse(BadRequest, http.StatusMethodNotAllowed, ce.Msg, err)
		o.Allow = http.MethodPost
		return p, o, false
	default:
		return p, refuse(BadRequest, http.StatusBadRequest, publicLine(err), err), false
	}
	if g.Verified {
		p.keyID, p.verified = g.Route.VerifiedBy(kr)
	}
	p.key, p.fp, err = g.Route.Keys(r, n, body)
	if err != nil {
		refused = refuse(BadRequest, http.StatusBadRequest, publicLine(err), err)
		refused.Key, refused.KeyID, refused.Verified = p.key, p.keyID, p.verified
		return p, refused, false
	}
	p.run = g.Route.OrderRun(p.key, n)
	p.body, p.refs = body, n.MerchantRefs
	return p, refused, true
}

// readBody reads the whole request body, bounded by max_body, and puts the
// same bytes back for the backend.
func (g *Gate) readBody(r *http.Request) ([]byte, Outcome, bool) {
	tooLarge := func(err error) Outcome {
		return refuse(TooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than max_body (%d bytes)", g.MaxBody), err)
	}
	if r.ContentLength > g.MaxBody {
		return nil, tooLarge(fmt.Errorf("body of %d bytes is larger than max_body %d", r.ContentLength, g.MaxBody)), false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, Outcome{}, true
	}
	body, err := readAll(r.Body, r.ContentLength, g.MaxBody)
	if err != nil {
		return nil, refuse(BadRequest, http.StatusBadRequest, MsgReadingBody, fmt.Errorf("reading body: %v", err)), false
	}
	if int64(len(body)) > g.MaxBody {
		return nil, tooLarge(fmt.Errorf("body is larger than max_body %d", g.MaxBody)), false
	}
	br := new(bodyReader)
	br.Reset(body)
	r.Body = br
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	return body, Outcome{}, true
}

// readAll reads rd to its end, but never more than limit+1 bytes (to see
// a body longer than limit), into a buffer of the declared size (plus one
// byte, to see a body longer than declared), or, with none declared
// (size < 0), as io.ReadAll does. bytes.Buffer.ReadFrom wants 512 bytes
// free before every read: a 60-byte form cost 4.5 KiB of allocations. A
// body as declared fills the buffer, bounded by its size: the bound is
// an io.LimitReader (an allocation) only for the rest.
func readAll(rd io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(io.LimitReader(rd, limit+1))
	}
	b := make([]byte, min(size, limit)+1)
	n, err := io.ReadFull(rd, b)
	switch err {
	case nil: // longer than declared
		rest, err := io.ReadAll(io.LimitReader(rd, limit+1-int64(len(b))))
		return append(b, rest...), err
	case io.EOF, io.ErrUnexpectedEOF: // as declared, or shorter
		return b[:n], nil
	}
	return nil, err
}

// bodyReader is the body read, put back for the backend: io.NopCloser of
// a bytes.Reader in one allocation, not two.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }
