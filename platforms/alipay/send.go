package alipay

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// The files keygen writes for Alipay.
const (
	filePrivate = "alipay_private_key.pem"
	filePublic  = "alipay_public_key.pem"
)

// sender signs Alipay's trade_status_sync with a test key. Alipay
// re-signs each retry with a new notify_time, and so does send.
var sender = &keying.Sender{
	Summary: "form POST signed RSA2 (SHA256withRSA), trade_status_sync",
	Files:   []string{filePrivate, filePublic},
	Keygen: func() ([]keying.KeyFile, error) {
		k, private, err := signer.NewRSAKey()
		if err != nil {
			return nil, err
		}
		public, err := signer.PublicKeyPEM(&k.PublicKey)
		if err != nil {
			return nil, err
		}
		return []keying.KeyFile{{Name: filePrivate, Data: private}, {Name: filePublic, Data: public}}, nil
	},
	NewID: newID,
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		k, err := in.PrivateKey(filePrivate)
		if err != nil {
			return nil, nil, err
		}
		params := signer.AlipayNotify("2021000000000001", in.Order, in.ID, "TRADE_SUCCESS", in.Major())
		body, err := (signer.Alipay{Key: k}).Body(params)
		if err != nil {
			return nil, nil, err
		}
		return []byte(body), http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}, nil
	},
}

// newID is a trade_no: digits.
func newID() string {
	return time.Now().Format("20060102") + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
}
