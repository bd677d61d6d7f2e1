package alipay

import (
	"math/big"
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
	k, _ := platformtest.Keys(t)
	expires := presettest.Now.Add(10 * 24 * time.Hour)

	t.Run("alipay", func(t *testing.T) {
		for _, c := range []struct {
			name string
			pem  []byte
			want keying.KeyInfo
		}{
			{"bare key", platformtest.PublicKeyPEM(t, &k.PublicKey), keying.KeyInfo{ID: "public_key"}},
			{"certificate", platformtest.CertificateValid(t, k, big.NewInt(0x2088), "Alipay", presettest.Now.Add(-time.Hour), expires),
				keying.KeyInfo{ID: "2088", NotAfter: expires}},
		} {
			p, err := New(Config{PublicKey: c.pem})
			if err != nil {
				t.Fatal(err)
			}
			kr := p.(keying.KeyReporter)
			if got := kr.Keys(); len(got) != 1 || got[0].ID != c.want.ID || !got[0].NotAfter.Equal(c.want.NotAfter) {
				t.Errorf("%s: Keys() = %+v, want %+v", c.name, got, c.want)
			}
			if got := kr.VerifiedBy(nil); got != c.want.ID {
				t.Errorf("%s: VerifiedBy = %q, want %q", c.name, got, c.want.ID)
			}
		}
	})
}
