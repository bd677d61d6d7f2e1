package sdkbackend

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"

	"github.com/go-pay/gopay"
	gopayalipay "github.com/go-pay/gopay/alipay"
	"github.com/smartwalle/alipay/v3"
)

// appKey is the merchant's own application key, which smartwalle/alipay's
// client wants even to verify: it signs the merchant's API calls, never a
// notification, so one made up per process serves.
var appKey = sync.OnceValue(func() string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
})

// alipayClient is a sandbox client (it never downloads a certificate)
// holding Alipay's public key.
func alipayClient(alipayPublicKeyPEM string) *alipay.Client {
	c, err := alipay.New("2021000000000000", appKey(), false)
	if err != nil {
		panic(fmt.Sprintf("sdkbackend: alipay client: %v", err))
	}
	if err := c.LoadAliPayPublicKey(alipayPublicKeyPEM); err != nil {
		panic(fmt.Sprintf("sdkbackend: alipay public key: %v", err))
	}
	return c
}

// pemBody is the base64 inside one PEM block, on one line.
func pemBody(s string) string {
	var out strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") {
			out.WriteString(line)
		}
	}
	return out.String()
}

func gopayAlipayVerify(alipayPublicKeyPEM string, bm gopay.BodyMap) (bool, error) {
	return gopayalipay.VerifySign(alipayPublicKeyPEM, bm)
}
