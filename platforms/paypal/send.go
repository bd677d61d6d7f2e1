package paypal

import (
	"crypto/rand"
	"fmt"
	"math/big"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// The files keygen writes for PayPal.
const (
	filePrivate = "paypal_private_key.pem"
	fileCert    = "paypal_cert.pem"
	fileWebhook = "paypal_webhook_id"
)

// sender signs PayPal events by type with a test key and its
// certificate: the order's capture completed (resource.id the order) or
// refunded (the refund, linked up to the capture); the body depends on
// the id, type, order, refund and amounts only.
var sender = &keying.Sender{
	Summary: "PAYPAL-TRANSMISSION-* headers (SHA256withRSA), events by type",
	Files:   []string{filePrivate, fileCert, fileWebhook},
	Flags:   []keying.SendFlag{{Name: "webhook-id", Usage: "PayPal: the webhook id, instead of the file in --dir", Key: true}},
	Keygen: func() ([]keying.KeyFile, error) {
		k, private, err := signer.NewRSAKey()
		if err != nil {
			return nil, err
		}
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
		if err != nil {
			return nil, err
		}
		cert, err := signer.Certificate(k, serial, "messageverificationcerts.sandbox.paypal.com")
		if err != nil {
			return nil, err
		}
		return []keying.KeyFile{{Name: filePrivate, Data: private}, {Name: fileCert, Data: cert},
			{Name: fileWebhook, Data: []byte("WH-TEST-" + signer.Nonce(17))}}, nil
	},
	NewID: func() string { return "WH-TEST-" + signer.Nonce(17) },
	Events: []keying.SendEvent{
		{Name: "PAYMENT.CAPTURE.COMPLETED", About: "the order's capture completed"},
		{Name: "PAYMENT.CAPTURE.REFUNDED", About: "a refund of the capture"},
	},
	RefundEvent: "PAYMENT.CAPTURE.REFUNDED",
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		p := signer.PayPal{}
		var err error
		if p.Key, err = in.PrivateKey(filePrivate); err != nil {
			return keying.Signed{}, err
		}
		if p.WebhookID, err = in.Value(in.Flag("webhook-id"), fileWebhook, "--webhook-id"); err != nil {
			return keying.Signed{}, err
		}
		var body []byte
		switch in.Event {
		case "PAYMENT.CAPTURE.COMPLETED":
			body = signer.PayPalEvent(in.ID, in.Event, in.Order, in.Major())
		case "PAYMENT.CAPTURE.REFUNDED":
			body = signer.PayPalRefundEvent(in.ID, in.Refund, in.Order, in.RefundMajor())
		default:
			return keying.Signed{}, fmt.Errorf("no event %q", in.Event)
		}
		header, err := p.Header(body, in.Now)
		return keying.Signed{Body: body, Header: header}, err
	},
}
