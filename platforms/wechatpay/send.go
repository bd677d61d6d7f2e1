package wechatpay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// sender signs a payment's TRANSACTION.SUCCESS and a refund's
// notifications with a test key; the body depends on the id, event,
// order, refund and amounts only, as a retry's does. With --sp-mchid and
// --sub-mchid it signs a service provider's (服务商): the resource names
// sp_mchid and sub_mchid (a payment's also sp_appid and sub_appid) instead
// of mchid and appid.
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
	Events: []keying.SendEvent{
		{Name: "paid", About: "TRANSACTION.SUCCESS"},
		{Name: "refund", About: "REFUND.SUCCESS"},
		{Name: "refund_abnormal", About: "REFUND.ABNORMAL (the refund's own event)"},
		{Name: "refund_closed", About: "REFUND.CLOSED (the refund's own event)"},
	},
	RefundEvent: "refund",
	TradeID:     true,
	Flags: []keying.SendFlag{
		{Name: "key-id", Usage: "WeChat Pay: the Wechatpay-Serial (public key id), instead of the file in --dir", Key: true},
		// A service provider's (服务商) notification for its sub-merchant,
		// whose resource names both instead of mchid.
		{Name: "sp-mchid", Usage: "WeChat Pay service provider (服务商): the provider's merchant id; with --sub-mchid", Order: true},
		{Name: "sub-mchid", Usage: "WeChat Pay service provider (服务商): the sub-merchant's id, whose order it is; with --sp-mchid", Order: true},
	},
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		sp, subMch := in.Flag("sp-mchid"), in.Flag("sub-mchid")
		partner := sp != "" || subMch != ""
		if partner && (sp == "" || subMch == "") {
			return keying.Signed{}, errors.New("a service provider's notification names both merchants: --sp-mchid and --sub-mchid")
		}
		wp := signer.WechatPay{}
		var err error
		if wp.Key, err = in.PrivateKey(filePrivate); err != nil {
			return keying.Signed{}, err
		}
		if wp.Serial, err = in.Value(in.Flag("key-id"), filePublicID, "--key-id"); err != nil {
			return keying.Signed{}, err
		}
		if wp.APIv3Key, err = in.Value(in.Secret, fileAPIv3, "--secret"); err != nil {
			return keying.Signed{}, err
		}
		ev := signer.WechatPayEvent{ID: in.ID, Nonce: in.Nonce(12), CreateTime: keying.SendEventTime}
		switch in.Event {
		case "paid":
			ev.EventType = "TRANSACTION.SUCCESS"
			ev.Resource = signer.WechatPayTransaction(in.ID, in.Order, "SUCCESS", in.Amount)
			if partner {
				ev.Resource = signer.WechatPayPartnerTransaction(sp, subMch, in.ID, in.Order, "SUCCESS", in.Amount)
			}
		case "refund", "refund_abnormal", "refund_closed":
			status := strings.ToUpper(strings.TrimPrefix(strings.TrimPrefix(in.Event, "refund"), "_"))
			if status == "" {
				status = "SUCCESS"
			}
			// Each notification has an id of its own; the payment's is the
			// transaction's, so a refund's is derived from it.
			ev.ID = in.ID + "-" + in.Nonce(8)
			ev.EventType = "REFUND." + status
			ev.OriginalType = "refund"
			ev.Summary = map[string]string{"SUCCESS": "退款成功", "ABNORMAL": "退款异常", "CLOSED": "退款关闭"}[status]
			ev.Resource = signer.WechatPayRefundResource(in.ID, in.Order, "50"+in.Nonce(20), in.Refund, status, in.RefundAmount, in.Amount)
			if partner {
				ev.Resource = signer.WechatPayPartnerRefundResource(sp, subMch, in.ID, in.Order, "50"+in.Nonce(20), in.Refund, status,
					in.RefundAmount, in.Amount)
			}
		default:
			return keying.Signed{}, fmt.Errorf("no event %q", in.Event)
		}
		body, header, err := wp.Notification(ev)
		return keying.Signed{Body: body, Header: header}, err
	},
}

// NewID is a transaction_id: digits (both API versions).
func NewID() string {
	return time.Now().Format("20060102") + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
}
