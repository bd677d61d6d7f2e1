package wechatpay

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// The files keygen writes for WeChat Pay API v3.
const (
	filePrivate  = "wechatpay_private_key.pem"
	filePublic   = "wechatpay_public_key.pem"
	filePublicID = "wechatpay_public_key_id"
	fileAPIv3    = "wechatpay_apiv3_key"
)

// sender signs a TRANSACTION.SUCCESS notification with a test key; the
// body depends on the id, order and amount only, as a retry's does.
var sender = &keying.Sender{
	Summary: "API v3: Wechatpay-Signature (SHA256withRSA) headers and\na resource encrypted with the APIv3 key (AES-256-GCM)",
	Files:   []string{filePrivate, filePublic, filePublicID, fileAPIv3},
	Keygen: func() ([]keying.KeyFile, error) {
		k, private, err := signer.NewRSAKey()
		if err != nil {
			return nil, err
		}
		public, err := signer.PublicKeyPEM(&k.PublicKey)
		if err != nil {
			return nil, err
		}
		return []keying.KeyFile{{Name: filePrivate, Data: private}, {Name: filePublic, Data: public},
			{Name: filePublicID, Data: []byte("PUB_KEY_ID_TEST" + signer.Nonce(16))},
			{Name: fileAPIv3, Data: []byte(signer.Nonce(32))}}, nil
	},
	NewID: NewID,
	Sign: func(in keying.SendInput) ([]byte, http.Header, error) {
		wp := signer.WechatPay{}
		var err error
		if wp.Key, err = in.PrivateKey(filePrivate); err != nil {
			return nil, nil, err
		}
		if wp.Serial, err = in.Value(in.KeyID, filePublicID, "--key-id"); err != nil {
			return nil, nil, err
		}
		if wp.APIv3Key, err = in.Value(in.Secret, fileAPIv3, "--secret"); err != nil {
			return nil, nil, err
		}
		return wp.Notification(signer.WechatPayEvent{
			ID:         in.ID,
			EventType:  "TRANSACTION.SUCCESS",
			Resource:   signer.WechatPayTransaction(in.ID, in.Order, "SUCCESS", in.Amount),
			Nonce:      in.Nonce(12),
			CreateTime: keying.SendEventTime,
		})
	},
}

// NewID is a transaction_id: digits (both API versions).
func NewID() string {
	return time.Now().Format("20060102") + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
}
