package wechatpay

import (
	"crypto/rsa"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestKeysAndVerifiedBy: each keyed preset lists its configured keys
// (certificates with their expiry) and names the one that verified a
// request.
func TestKeysAndVerifiedBy(t *testing.T) {
	k, other := platformtest.Keys(t)
	expires := presettest.Now.Add(10 * 24 * time.Hour)
	serial, _ := new(big.Int).SetString(wxSerialHex, 16)
	cert := platformtest.CertificateValid(t, other, serial, "Wechatpay", presettest.Now.Add(-time.Hour), expires)

	t.Run("wechatpay", func(t *testing.T) {
		p, err := New(Config{PublicKey: platformtest.PublicKeyPEM(t, &k.PublicKey), PublicKeyID: wxPubKeyID,
			Certificates: [][]byte{cert}})
		if err != nil {
			t.Fatal(err)
		}
		kr := p.(keying.KeyReporter)
		want := []keying.KeyInfo{{ID: wxPubKeyID}, {ID: wxSerialHex, NotAfter: expires}}
		if got := kr.Keys(); len(got) != 2 || got[0] != want[0] || got[1].ID != want[1].ID || !got[1].NotAfter.Equal(expires) {
			t.Fatalf("Keys() = %+v, want %+v", got, want)
		}
		body := []byte(`{"id":"EV-1","event_type":"TRANSACTION.SUCCESS"}`)
		for _, c := range []struct {
			key    *rsa.PrivateKey
			serial string
		}{{k, wxPubKeyID}, {other, wxSerialHex}, {other, "00" + wxSerialHex[:10] + strings.ToLower(wxSerialHex[10:])}} {
			r := wxRequest(t, c.key, c.serial, presettest.Now, "n1", body)
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
}
