package paypal

import (
	"crypto/rsa"
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
	k, other := platformtest.Keys(t)
	expires := presettest.Now.Add(10 * 24 * time.Hour)

	t.Run("paypal rotation", func(t *testing.T) {
		// Two pinned certificates valid at once, as during a rotation:
		// VerifiedBy names the one whose key signed.
		oldCert := platformtest.CertificateValid(t, k, big.NewInt(0x0a), "messageverificationcerts.sandbox.paypal.com", presettest.Now.Add(-time.Hour), expires)
		newCert := platformtest.CertificateValid(t, other, big.NewInt(0x0b), "messageverificationcerts.sandbox.paypal.com", presettest.Now.Add(-time.Hour), presettest.Now.Add(365*24*time.Hour))
		p, err := New(Config{WebhookID: ppWebhookID, Certificates: [][]byte{oldCert, newCert}, HTTPClient: noNetwork(t)})
		if err != nil {
			t.Fatal(err)
		}
		kr := p.(keying.KeyReporter)
		if ids := keying.KeyIDs(kr.Keys()); len(ids) != 2 || ids[0] != "0A" || ids[1] != "0B" {
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
		if soon := keying.ExpiringWithin(kr.Keys(), presettest.Now, 30*24*time.Hour); len(soon) != 1 || soon[0].ID != "0A" {
			t.Errorf("ExpiringWithin 30 days: %+v, want 0A only", soon)
		}
	})
}
