package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestConsoleShowDecrypted: a WeChat Pay notification's resource is
// encrypted in the journal; the key page shows it decrypted only on a
// console with show_decrypted, and never the APIv3 key.
func TestConsoleShowDecrypted(t *testing.T) {
	k, _ := platformtest.Keys(t)
	pubFile := platformtest.WriteFile(t, "platform_public_key.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	wx := platformtest.WechatPay{Key: k, Serial: wxPubKeyID, APIv3Key: wxAPIv3Key}
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 500, "down", 0
	})
	base := gatewaytest.StartCaddy(t, `
	route /wx {
		idempotency {
			platform wechatpay
			public_key `+pubFile+`
			public_key_id `+wxPubKeyID+`
			secret `+wxAPIv3Key+`
			store memory
		}
		reverse_proxy {backend}
	}
	route /plain/* {
		idempotency_console
	}
	route /open/* {
		idempotency_console {
			show_decrypted
		}
	}`, "{backend}", be.Addr())

	body, hdr := wx.Notification(t, platformtest.WechatPayEvent{ID: "note-dec-1", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200dec1", "order-dec-1", "SUCCESS", 990)})
	hdr.Set("X-Order", "wx-dec")
	if r := gatewaytest.Post(t, base+"/wx", "application/json", string(body), hdr); r.Status != 500 {
		t.Fatalf("notification: %d, want the backend's 500", r.Status)
	}
	key := "wechatpay:1230000109:4200dec1:paid"
	q := "key?" + url.Values{"store": {"memory"}, "k": {key}}.Encode()

	_, plain := getPage(t, base+"/plain/"+q)
	if !strings.Contains(plain, "ciphertext") {
		t.Fatalf("the key page lacks the journaled notification:\n%s", plain)
	}
	if strings.Contains(plain, "order-dec-1") || strings.Contains(plain, "Decrypted resource") {
		t.Fatal("a console without show_decrypted shows the decrypted resource")
	}
	_, open := getPage(t, base+"/open/"+q)
	if !strings.Contains(section(open, "notification"), "Decrypted resource") || !strings.Contains(open, "order-dec-1") {
		t.Fatalf("show_decrypted: the decrypted resource (out_trade_no order-dec-1) is missing:\n%s", section(open, "notification"))
	}
	if strings.Contains(open, wxAPIv3Key) {
		t.Fatal("the APIv3 key appears on the page")
	}
}

// Test secrets; they sign nothing real.
const (
	wxAPIv3Key = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4" // 32 bytes
	wxPubKeyID = "PUB_KEY_ID_0114232134912410000000000000"
)
