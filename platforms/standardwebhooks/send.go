package standardwebhooks

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// fileSecret is the file keygen writes for Standard Webhooks.
const fileSecret = "standard_webhooks_secret"

// sender signs messages by type with a test secret (a sender names its
// own types; these are a payment's); the body depends on the type, order,
// refund and amounts only.
var sender = &keying.Sender{
	Summary: "webhook-id, webhook-timestamp, webhook-signature",
	Files:   []string{fileSecret},
	Keygen: func() ([]keying.KeyFile, error) {
		b := make([]byte, 24)
		rand.Read(b)
		return []keying.KeyFile{{Name: fileSecret, Data: []byte("whsec_" + base64.StdEncoding.EncodeToString(b))}}, nil
	},
	NewID: func() string { return "msg_" + signer.Nonce(24) },
	Events: []keying.SendEvent{
		{Name: "payment.succeeded", About: "data: order_id, amount"},
		{Name: "payment.failed", About: "data: order_id, amount"},
		{Name: "payment.refunded", About: "data: order_id, refund_id, amount"},
	},
	RefundEvent: "payment.refunded",
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		secret, err := in.Value(in.Secret, fileSecret, "--secret")
		if err != nil {
			return keying.Signed{}, err
		}
		at := keying.SendEventTime.Format(time.RFC3339)
		var body []byte
		switch in.Event {
		case "payment.succeeded", "payment.failed":
			body = fmt.Appendf(nil, `{"type":%q,"timestamp":%q,"data":{"order_id":%q,"amount":%d}}`, in.Event, at, in.Order, in.Amount)
		case "payment.refunded":
			body = fmt.Appendf(nil, `{"type":%q,"timestamp":%q,"data":{"order_id":%q,"refund_id":%q,"amount":%d}}`, in.Event, at, in.Order, in.Refund, in.RefundAmount)
		default:
			return keying.Signed{}, fmt.Errorf("no event %q", in.Event)
		}
		header, err := signer.StandardWebhooksHeader(secret, in.ID, in.Now, body)
		return keying.Signed{Body: body, Header: header}, err
	},
}
