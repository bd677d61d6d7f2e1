package alipay

import (
	"fmt"
	"net/http"
	"net/url"
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

// sender signs Alipay's trade_status_sync notify, and the browser's
// signed return, with a test key. Alipay re-signs each retry with a new
// notify_time, and so does send.
var sender = &keying.Sender{
	Summary: "form POST signed RSA2 (SHA256withRSA), trade_status_sync;\nthe browser's return: a signed GET query",
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
	Events: []keying.SendEvent{
		{Name: "paid", About: "TRADE_SUCCESS"},
		{Name: "refund", About: "a refund: out_biz_no, refund_fee (the trade's refunded total); TRADE_CLOSED when all is refunded"},
		{Name: "closed", About: "TRADE_CLOSED, never paid"},
		{Name: "finished", About: "TRADE_FINISHED, no refund possible any more (the order's paid)"},
		{Name: "return", About: "the browser's return to return_url, a signed GET (the order's paid with `return business`, its own key with `return display`)"},
		{Name: "created", About: "WAIT_BUYER_PAY"},
	},
	RefundEvent: "refund",
	TradeID:     true,
	Sign: func(in keying.SendInput) (keying.Signed, error) {
		k, err := in.PrivateKey(filePrivate)
		if err != nil {
			return keying.Signed{}, err
		}
		var params url.Values
		switch in.Event {
		case "paid":
			params = signer.AlipayNotify(appID, in.Order, in.ID, "TRADE_SUCCESS", in.Major())
		case "refund":
			// refund_fee is the trade's refunded total, this refund's
			// included, as Alipay writes it.
			params = signer.AlipayRefund(appID, in.Order, in.ID, in.Major(), in.Refund, in.RefundedMajor())
		case "closed":
			params = signer.AlipayUnpaid(appID, in.Order, in.ID, "TRADE_CLOSED", in.Major())
		case "created":
			params = signer.AlipayUnpaid(appID, in.Order, in.ID, "WAIT_BUYER_PAY", in.Major())
		case "finished":
			params = signer.AlipayFinished(appID, in.Order, in.ID, in.Major())
		case "return":
			q, err := (signer.Alipay{Key: k}).Body(signer.AlipayReturn(appID, in.Order, in.ID, in.Major()))
			return keying.Signed{Method: http.MethodGet, Query: q}, err
		default:
			return keying.Signed{}, fmt.Errorf("no event %q", in.Event)
		}
		body, err := (signer.Alipay{Key: k}).Body(params)
		if err != nil {
			return keying.Signed{}, err
		}
		return keying.Signed{Body: []byte(body), Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}}, nil
	},
}

// appID is the test notifications' app.
const appID = "2021000000000001"

// newID is a trade_no: digits.
func newID() string {
	return time.Now().Format("20060102") + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
}
