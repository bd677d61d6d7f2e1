package paypal

import (
	"context"

	"github.com/idemgate/idemgate/keying"
)

// transmissionLog is PayPal's transmission log on the route's store
// (guest.Route.Remember): a transmission id is remembered as
// paypal-transmission:<id> with the body's digest for the answers' ttl,
// and a conflict means the id came before with another body. A route
// without a store to remember in (nil) skips the check.
type transmissionLog func(ctx context.Context, key, fingerprint string) (bool, error)

func (l transmissionLog) Seen(ctx context.Context, id, bodyDigest string) (bool, error) {
	return l(ctx, "paypal-transmission:"+id, bodyDigest)
}

var _ keying.TransmissionLog = transmissionLog(nil)
