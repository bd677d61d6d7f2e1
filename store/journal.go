package store

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// The journal: what happened to each notification. A record keeps, besides
// its answer, the notification as it was received and every attempt to
// deliver it to the backend, so an operator can tell what happened to a key
// and send it again.

// StateFailed: the last attempt failed (or its outcome is unknown and its
// claim ran out). The key is free: the platform's next copy claims it and
// is forwarded, and the record stays for inspection until its ttl.
const StateFailed State = "failed"

// StateDead is StateFailed once the platform's retry window since the key
// was first seen has passed: nobody will retry it. Stores keep failed
// records; dead is computed at read time (Record.StateAt), as the window
// is the platform's, not the store's. A failed record marked Dead (its
// last attempt was) is dead at once.
const StateDead State = "dead"

// Attempt outcomes.
const (
	AttemptAnswered    = "answered"
	AttemptFailed      = "failed"
	AttemptAmbiguous   = "ambiguous"
	AttemptUnreachable = "unreachable"
)

// MaxAttempts bounds the attempts a record keeps: the most recent ones.
// AttemptCount still counts them all.
const MaxAttempts = 32

// MaxAttemptBody bounds the failure answer kept per attempt.
const MaxAttemptBody = 1 << 10

// Notification is a request as the gateway received it.
type Notification struct {
	Method string      `json:"method"`
	URI    string      `json:"uri"`
	Host   string      `json:"host,omitempty"`
	Header http.Header `json:"header,omitempty"`
	// Body is the raw body, at most the journal's cap; BodySize is the
	// whole body's size, so a cut body is told apart.
	Body     []byte `json:"body,omitempty"`
	BodySize int64  `json:"body_size"`
	// Addr is the local address the request came in on and TLS whether it
	// was HTTPS: where a redelivery is sent so it takes the same route.
	Addr string `json:"addr,omitempty"`
	TLS  bool   `json:"tls,omitempty"`
	// OrigURI is the URI the platform sent, when a rewrite, handle_path
	// or uri strip_prefix before the handler changed it into URI (the
	// one the handler, and so the backend, saw); "" when they are equal.
	OrigURI string `json:"orig_uri,omitempty"`
	// Route names the handler that took the notification ("<scope>#<n>",
	// see app.Route.Name): a redelivery enters that handler.
	Route string `json:"route,omitempty"`
	// Remote is the sender's address: a redelivery that must find its
	// route through the site's routing (after a restart) passes the
	// route's remote_ip matchers as the platform's copy did.
	Remote string `json:"remote,omitempty"`
	// MerchantRefs are the merchant's own references the notification's
	// signed content names (keying.Notification.MerchantRefs): the store
	// files the key under each when it settles it (see Searcher).
	MerchantRefs []string `json:"merchant_refs,omitempty"`
}

// ReceivedURI is the URI as the platform sent it.
func (n *Notification) ReceivedURI() string {
	if n.OrigURI != "" {
		return n.OrigURI
	}
	return n.URI
}

// Truncated reports whether Body is shorter than the body received.
func (n *Notification) Truncated() bool { return int64(len(n.Body)) < n.BodySize }

// Attempt is one forward of a key's notification to the backend.
type Attempt struct {
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	// Status is the backend's status, 0 when none came back.
	Status int `json:"status,omitempty"`
	// Outcome is AttemptAnswered, AttemptFailed, AttemptAmbiguous or
	// AttemptUnreachable.
	Outcome string `json:"outcome"`
	// Body is the start of a failure's answer (MaxAttemptBody).
	Body []byte `json:"body,omitempty"`
	// Error says why the attempt failed in words: "connection refused",
	// "timeout after 30s", "status 500" (MaxAttemptError).
	Error string `json:"error,omitempty"`
	// Resigned: a redelivery that carried a fresh signature over the
	// same body (the gateway holds the route's signing secret).
	Resigned bool `json:"resigned,omitempty"`
	// Dead: the attempt ended the key's deliveries for good (an async
	// delivery whose platform signature had expired, which no retry can
	// renew): the settle that journals it marks the record Dead, and the
	// key reads dead at once, whatever the retry window.
	Dead bool `json:"dead,omitempty"`
}

// MaxAttemptError bounds an attempt's error text.
const MaxAttemptError = 256

// Journal is what the owner of a claim adds to the record when it settles
// it (Complete, Release, Leave): the journal rides on the write the claim
// needs anyway, so it costs no extra round trip.
type Journal struct {
	// Notification is kept when the record has none yet: the first
	// copy's bytes are the ones kept. nil leaves it as it is.
	Notification *Notification
	// Attempt is appended, if not nil.
	Attempt *Attempt
}

// CopyCounts counts a key's copies by what their claim found.
type CopyCounts struct {
	// Forwarded: copies that won the claim (the first, and retries of a
	// failed key).
	Forwarded int64 `json:"forwarded"`
	// Replayed: copies that found the answer.
	Replayed int64 `json:"replayed"`
	// InFlight: copies that found the key at the backend (they waited or
	// were refused).
	InFlight int64 `json:"in_flight"`
}

// StateAt is the record's state as an operator sees it at t: a failed key
// marked Dead, or whose first copy is older than the platform's retry
// window, is dead. A window of 0 (unknown) never makes a key dead by it.
//
// The mark, not the attempts, decides: a listing has no attempts, and a
// redelivery's claim clears the mark while the dead attempt stays in the
// journal.
func (r *Record) StateAt(t time.Time, window time.Duration) State {
	if r.State == StateFailed && r.Dead {
		return StateDead
	}
	return r.windowState(t, window)
}

// windowState is StateAt by the retry window alone.
func (r *Record) windowState(t time.Time, window time.Duration) State {
	if r.State == StateFailed && window > 0 && !t.Before(r.FirstSeen.Add(window)) {
		return StateDead
	}
	return r.State
}

// A notification is stored compressed with s2 and a dictionary of what
// notifications are made of (journal.dict: the platforms' header names,
// Alipay's and WeChat Pay's notify fields, WeChat Pay's and PayPal's
// envelopes, and Stripe's event, payment intent, charge, refund, Checkout
// session and invoice as its public fixtures (stripe/openapi, MIT) show
// them). Notifications are short, and most of their bytes are field names
// and envelopes the dictionary holds: a 1 KiB Stripe event is stored in
// 680 bytes in 7–9 µs, where zstd at SpeedFastest kept 897 in 20–23 (most
// of it entropy coding) and s2 alone 1,101 (BenchmarkNotificationCodec).
// zstd with the same dictionary keeps ~10% less again but costs 45–49 µs:
// klauspost's encoder restores its whole table from the dictionary's on
// every call.
//
// The dictionary is part of the stored format: it must never change
// (TestNotificationDictionary pins it). A better one would be a new
// version byte beside this one.
//
// Bodies the dictionary cannot help (base64 or hex of ciphertext and
// signatures) gain nothing from zstd either: at SpeedFastest it does not
// entropy-code their literals (3,000 random bytes as base64: 4,000 bytes
// in, 4,010 out). They are stored raw.
//
// Notifications stored with zstd before the dictionary still read.
//
// The blocks are s2's format, written by s2DictEncode (s2dict.go): s2's
// own dictionary encoder clears a 64 KiB table for each one.

//go:embed journal.dict
var notificationDictBytes []byte

// notificationDictRepeat is the dictionary's first repeat offset, part of
// the format as its bytes are: the last `{"id":"` in it (what s2.MakeDict
// picks for that start today; fixed here so a change in how a later s2
// picks it cannot change how stored notifications decode).
const notificationDictRepeat = 16288

var notificationDict = sync.OnceValue(func() *s2.Dict {
	return s2.MakeDictManual(notificationDictBytes, notificationDictRepeat)
})

// One zstd decoder serves all goroutines (DecodeAll is safe for
// concurrent use), with one state per P.
var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithDecoderMaxMemory(maxNotification))
	return d
})

// A stored notification's first byte: its fields compressed (s2 with the
// dictionary; zstd before it), or raw.
const (
	notificationZstd   = 1
	notificationRaw    = 2
	notificationS2Dict = 3
)

// maxNotification bounds a stored notification's decoded size: a body is
// bounded far below it (journal_body), so more is a damaged value.
const maxNotification = 64 << 20

// compressFrom: below this many bytes a notification is stored raw: the
// bytes saved on a short one do not pay for the work.
const compressFrom = 512

// encodeNotification is a notification's stored form: a version byte,
// then the fields, compressed together (headers compress too) when that
// pays.
func encodeNotification(n *Notification) []byte {
	sc := notificationScratch.Get().(*notificationBufs)
	defer notificationScratch.Put(sc)
	return slices.Clone(sc.encode(n))
}

// notificationScratch holds encodeNotification's working buffers: the
// uncompressed form, the encoder's output (allocated at a bound of 1.2×
// its input) and its read-back, so a request allocates only what is
// stored; and an attempt's stored form (journal).
var notificationScratch = sync.Pool{New: func() any { return new(notificationBufs) }}

type notificationBufs struct{ raw, z, check, att []byte }

// encode is n's stored form (encodeNotification), in sc's buffers: it is
// sc's, valid until sc is used again.
func (sc *notificationBufs) encode(n *Notification) []byte {
	sc.raw = appendRawNotification(sc.raw[:0], n)
	if len(sc.raw) < compressFrom {
		return sc.raw
	}
	raw := sc.raw[1:]
	if m := 1 + s2.MaxEncodedLen(len(raw)); cap(sc.z) < m {
		sc.z = make([]byte, m)
	}
	z := s2DictEncode(append(sc.z[:0], notificationS2Dict), raw)
	sc.z = z[:0]
	if len(z)-1 >= len(raw) {
		return sc.raw
	}
	// The block is read back before it is stored: the journal is the
	// notification's exact bytes for a redelivery, and s2DictEncode is
	// ours, so what it writes is checked against s2's own decoder (~0.5
	// µs for a 1 KiB event) and, were it ever not the same, written again
	// by s2's encoder.
	if cap(sc.check) < len(raw) {
		sc.check = make([]byte, len(raw))
	}
	if back, err := notificationDict().Decode(sc.check[:len(raw)], z[1:]); err != nil || !bytes.Equal(back, raw) {
		z = append(z[:1], notificationDict().Encode(sc.z[1:cap(sc.z)], raw)...)
	}
	return z
}

// journal is j's stored values in sc's buffers (valid until sc is used
// again), nil for none: the notification's stored form, and the
// attempt's after its length in two bytes (the scripts' arguments,
// journalArgs; newAnsweredRecord packs them in the record).
func (sc *notificationBufs) journal(j Journal) (notif, att []byte) {
	if j.Notification != nil {
		notif = sc.encode(j.Notification)
	}
	if j.Attempt != nil {
		att = appendAttempt(append(sc.att[:0], 0, 0), j.Attempt)
		binary.BigEndian.PutUint16(att, uint16(len(att)-2))
		sc.att = att
	}
	return notif, att
}

// appendRawNotification appends a notification's stored form,
// uncompressed, to b.
func appendRawNotification(b []byte, n *Notification) []byte {
	b = append(b, notificationRaw)
	b = appendString(b, n.Method)
	b = appendString(b, n.URI)
	b = appendString(b, n.Host)
	b = appendHeader(b, n.Header)
	b = appendBytes(b, n.Body)
	b = binary.AppendVarint(b, n.BodySize)
	b = appendString(b, n.Addr)
	tls := byte(0)
	if n.TLS {
		tls = 1
	}
	b = append(b, tls)
	// Fields added later go last: a notification stored before them
	// decodes with them empty.
	b = appendString(b, n.OrigURI)
	b = appendString(b, n.Route)
	b = appendString(b, n.Remote)
	// The merchant's references, only when there are some: a
	// notification without them is stored as before.
	if len(n.MerchantRefs) > 0 {
		b = binary.AppendUvarint(b, uint64(len(n.MerchantRefs)))
		for _, ref := range n.MerchantRefs {
			b = appendString(b, ref)
		}
	}
	return b
}

func decodeNotification(b []byte) (*Notification, error) {
	if len(b) == 0 {
		return nil, errCorrupt
	}
	raw := b[1:]
	switch b[0] {
	case notificationRaw:
	case notificationS2Dict:
		size, err := s2.DecodedLen(b[1:])
		if err != nil || size > maxNotification {
			return nil, errors.Join(errCorrupt, err)
		}
		if raw, err = notificationDict().Decode(make([]byte, size), b[1:]); err != nil {
			return nil, errors.Join(errCorrupt, err)
		}
	case notificationZstd:
		var err error
		if raw, err = zstdDecoder().DecodeAll(b[1:], nil); err != nil {
			return nil, errors.Join(errCorrupt, err)
		}
	default:
		return nil, errCorrupt
	}
	r := reader{b: raw}
	n := &Notification{Method: r.string(), URI: r.string(), Host: r.string(), Header: r.header()}
	if body := r.bytes(); len(body) > 0 {
		n.Body = slices.Clone(body)
	}
	n.BodySize = r.varint()
	n.Addr = r.string()
	n.TLS = r.byte() == 1
	if r.err == nil && len(r.b) > 0 {
		n.OrigURI, n.Route, n.Remote = r.string(), r.string(), r.string()
	}
	if r.err == nil && len(r.b) > 0 {
		count := r.uvarint()
		if count > 64 {
			return nil, errCorrupt
		}
		for i := uint64(0); i < count && r.err == nil; i++ {
			n.MerchantRefs = append(n.MerchantRefs, r.string())
		}
	}
	return n, r.err
}

// encodeAttempt is an attempt's stored form.
func encodeAttempt(a *Attempt) []byte {
	return appendAttempt(make([]byte, 0, 24+len(a.Body)), a)
}

// appendAttempt appends an attempt's stored form (encodeAttempt) to b.
func appendAttempt(b []byte, a *Attempt) []byte {
	b = binary.AppendVarint(b, a.Start.UnixMilli())
	b = binary.AppendVarint(b, a.Duration.Microseconds())
	b = binary.AppendVarint(b, int64(a.Status))
	b = appendString(b, a.Outcome)
	body := a.Body
	if len(body) > MaxAttemptBody {
		body = body[:MaxAttemptBody]
	}
	b = appendBytes(b, body)
	// Added later, last: older attempts decode with them empty.
	b = appendString(b, clipError(a.Error))
	// Flags: 1 resigned, 2 dead (added later: older attempts hold 0 or 1).
	flags := byte(0)
	if a.Resigned {
		flags |= 1
	}
	if a.Dead {
		flags |= 2
	}
	return append(b, flags)
}

func clipError(s string) string {
	if len(s) > MaxAttemptError {
		return s[:MaxAttemptError]
	}
	return s
}

func decodeAttempt(b []byte) (Attempt, error) {
	r := reader{b: b}
	a := Attempt{
		Start:    time.UnixMilli(r.varint()),
		Duration: time.Duration(r.varint()) * time.Microsecond,
		Status:   int(r.varint()),
		Outcome:  r.string(),
	}
	if body := r.bytes(); len(body) > 0 {
		a.Body = slices.Clone(body)
	}
	if r.err == nil && len(r.b) > 0 {
		a.Error = r.string()
		flags := r.byte()
		a.Resigned, a.Dead = flags&1 != 0, flags&2 != 0
	}
	return a, r.err
}

// cloneAttempt returns a copy whose body is capped.
func cloneAttempt(a *Attempt) Attempt {
	c := *a
	c.Start = time.UnixMilli(a.Start.UnixMilli())
	c.Duration = a.Duration.Truncate(time.Microsecond)
	if len(c.Body) > MaxAttemptBody {
		c.Body = c.Body[:MaxAttemptBody]
	}
	c.Body = slices.Clone(c.Body)
	c.Error = clipError(c.Error)
	return c
}
