package paypal

import "context"

// TransmissionLog remembers which body each transmission id carried.
// PayPal signs only a CRC-32 of the body, so a captured delivery's headers
// could carry a forged body of the same CRC: a transmission id seen before
// with another body digest is refused. The caller keeps the log (in the
// idempotency store, for the answers' ttl); the check only asks.
type TransmissionLog interface {
	// Seen records that transmission id carried a body of bodyDigest (hex
	// SHA-256) and reports conflict when id was recorded before with
	// another digest. The same id with the same digest is no conflict.
	Seen(ctx context.Context, id, bodyDigest string) (conflict bool, err error)
}

// transmissionLog is PayPal's transmission log on the route's store
// (guest.Route.Remember): a transmission id is remembered as
// paypal-transmission:<id> with the body's digest for the answers' ttl,
// and a conflict means the id came before with another body. A route
// without a store to remember in (nil) skips the check.
type transmissionLog func(ctx context.Context, key, fingerprint string) (bool, error)

func (l transmissionLog) Seen(ctx context.Context, id, bodyDigest string) (bool, error) {
	return l(ctx, "paypal-transmission:"+id, bodyDigest)
}

var _ TransmissionLog = transmissionLog(nil)
