package standardwebhooks

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// fileSecret is the file keygen writes for Standard Webhooks.
const fileSecret = "standard_webhooks_secret"

// sender signs a payment.succeeded message with a test secret; the body
// depends on the order and amount only.
var sender = &keying.Sender{
	Summary: "webhook-id, webhook-timestamp, webhook-signature",
	Files:   []string{fileSecret},
	Keygen: func() ([]keying.KeyFile, error) {
		b := make([]byte, 24)
		rand.Read(b)
		return []keying.KeyFile{{Name: fileSecret, Data: []byte("whsec_" + base64.StdEncoding.EncodeToString(b))}}, nil
	},
	NewID: func() string { return "msg_" + signer.Nonce(24) },
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		secret, err := in.Value(in.Secret, fileSecret, "--secret")
		if err != nil {
			return nil, nil, err
		}
		body := fmt.Appendf(nil, `{"type":"payment.succeeded","timestamp":%q,"data":{"order_id":%q,"amount":%d}}`,
			keying.SendEventTime.Format(time.RFC3339), in.Order, in.Amount)
		header, err := signer.StandardWebhooksHeader(secret, in.ID, in.Now, body)
		return body, header, err
	},
}
