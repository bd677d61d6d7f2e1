package keying

import (
	"crypto/rsa"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestKeysAndVerifiedBy: each keyed preset lists its configured keys
// (certificates with their expiry) and names the one that verified a
// request.
func TestKeysAndVerifiedBy(t *testing.T) {
	k, other := platformtest.Keys(t)
	expires := testNow.Add(10 * 24 * time.Hour)
	serial, _ := new(big.Int).SetString(wxSerialHex, 16)
	cert := platformtest.CertificateValid(t, other, serial, "Wechatpay", testNow.Add(-time.Hour), expires)

	t.Run("wechatpay", func(t *testing.T) {
		p, err := New("wechatpay", Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID,
			Certificates: [][]byte{cert}})
		if err != nil {
			t.Fatal(err)
		}
		kr := p.(KeyReporter)
		want := []KeyInfo{{ID: wxPubKeyID}, {ID: wxSerialHex, NotAfter: expires}}
		if got := kr.Keys(); len(got) != 2 || got[0] != want[0] || got[1].ID != want[1].ID || !got[1].NotAfter.Equal(expires) {
			t.Fatalf("Keys() = %+v, want %+v", got, want)
		}
		body := []byte(`{"id":"EV-1","event_type":"TRANSACTION.SUCCESS"}`)
		for _, c := range []struct {
			key    *rsa.PrivateKey
			serial string
		}{{k, wxPubKeyID}, {other, wxSerialHex}, {other, "00" + wxSerialHex[:10] + strings.ToLower(wxSerialHex[10:])}} {
			r := wxRequest(t, c.key, c.serial, testNow, "n1", body)
			if _, err := p.Verify(r); err != nil {
				t.Fatalf("verify with %s: %v", c.serial, err)
			}
			want := wxPubKeyID
			if c.key == other {
				want = wxSerialHex
			}
			if got := kr.VerifiedBy(r); got != want {
				t.Errorf("VerifiedBy (serial %s) = %q, want %q", c.serial, got, want)
			}
		}
	})

	t.Run("alipay", func(t *testing.T) {
		for _, c := range []struct {
			name string
			pem  []byte
			want KeyInfo
		}{
			{"bare key", platformtest.PublicKeyPEM(t, &k.PublicKey), KeyInfo{ID: "public_key"}},
			{"certificate", platformtest.CertificateValid(t, k, big.NewInt(0x2088), "Alipay", testNow.Add(-time.Hour), expires),
				KeyInfo{ID: "2088", NotAfter: expires}},
		} {
			p, err := New("alipay", Config{PublicKey: c.pem})
			if err != nil {
				t.Fatal(err)
			}
			kr := p.(KeyReporter)
			if got := kr.Keys(); len(got) != 1 || got[0].ID != c.want.ID || !got[0].NotAfter.Equal(c.want.NotAfter) {
				t.Errorf("%s: Keys() = %+v, want %+v", c.name, got, c.want)
			}
			if got := kr.VerifiedBy(nil); got != c.want.ID {
				t.Errorf("%s: VerifiedBy = %q, want %q", c.name, got, c.want.ID)
			}
		}
	})

	t.Run("paypal rotation", func(t *testing.T) {
		// Two pinned certificates valid at once, as during a rotation:
		// VerifiedBy names the one whose key signed.
		oldCert := platformtest.CertificateValid(t, k, big.NewInt(0x0a), "messageverificationcerts.sandbox.paypal.com", testNow.Add(-time.Hour), expires)
		newCert := platformtest.CertificateValid(t, other, big.NewInt(0x0b), "messageverificationcerts.sandbox.paypal.com", testNow.Add(-time.Hour), testNow.Add(365*24*time.Hour))
		p, err := New("paypal", Config{WebhookID: ppWebhookID, Certificates: [][]byte{oldCert, newCert}, HTTPClient: noNetwork(t)})
		if err != nil {
			t.Fatal(err)
		}
		kr := p.(KeyReporter)
		if ids := KeyIDs(kr.Keys()); len(ids) != 2 || ids[0] != "0A" || ids[1] != "0B" {
			t.Fatalf("Keys() = %v, want 0A, 0B", ids)
		}
		ev := ppEvent("WH-1", "PAYMENT.CAPTURE.COMPLETED", "R-1")
		for key, want := range map[*rsa.PrivateKey]string{k: "0A", other: "0B"} {
			r := ppReq(t, key, ppWebhookID, "tx-"+want, ppCertURL, ev)
			r.Now = ppTxTime
			if _, err := p.Verify(r); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if got := kr.VerifiedBy(r); got != want {
				t.Errorf("VerifiedBy = %q, want %q", got, want)
			}
		}
		if soon := ExpiringWithin(kr.Keys(), testNow, 30*24*time.Hour); len(soon) != 1 || soon[0].ID != "0A" {
			t.Errorf("ExpiringWithin 30 days: %+v, want 0A only", soon)
		}
	})
}
