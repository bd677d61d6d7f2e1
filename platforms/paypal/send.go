package paypal

import (
	"crypto/rand"
	"math/big"
	"net/http"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// The files keygen writes for PayPal.
const (
	filePrivate = "paypal_private_key.pem"
	fileCert    = "paypal_cert.pem"
	fileWebhook = "paypal_webhook_id"
)

// sender signs a PAYMENT.CAPTURE.COMPLETED event with a test key and its
// certificate; the body depends on the id, order and amount only.
var sender = &keying.Sender{
	Summary: "PAYPAL-TRANSMISSION-* headers (SHA256withRSA), a\nPAYMENT.CAPTURE.COMPLETED event",
	Files:   []string{filePrivate, fileCert, fileWebhook},
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
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		p := signer.PayPal{}
		var err error
		if p.Key, err = in.PrivateKey(filePrivate); err != nil {
			return nil, nil, err
		}
		if p.WebhookID, err = in.Value(in.WebhookID, fileWebhook, "--webhook-id"); err != nil {
			return nil, nil, err
		}
		body := signer.PayPalEvent(in.ID, "PAYMENT.CAPTURE.COMPLETED", in.Order, in.Major())
		header, err := p.Header(body, in.Now)
		return body, header, err
	},
}
