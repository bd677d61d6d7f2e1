package wechatpay

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// Tests against samples signed by the platforms themselves, taken from
// their SDKs' test suites and documentation (keying/testdata says where
// each comes from): they pin the verifiers to the platforms' real output,
// not only to internal/platformtest's reading of the documentation.

func TestWechatPayGoSDKSample(t *testing.T) {
	body := presettest.ReadTestdata(t, "wechatpay-go/body.json")
	h := presettest.HeaderFile(t, "wechatpay-go/headers.txt")
	cert := presettest.ReadTestdata(t, "wechatpay-go/cert.pem")
	signedAt := time.Unix(1624523846, 0)
	req := func(now time.Time, b []byte, h http.Header) *keying.Request {
		return &keying.Request{Method: http.MethodPost, Header: h, Body: b, Now: now}
	}
	cfg := Config{Certificates: [][]byte{cert}}
	const key = "3119dfba-e649-5eec-ab1e-3412bc4d2e17"
	presettest.RunVerifyCases(t, New, []presettest.VerifyCase[Config]{
		{Name: "as the SDK's test verifies it", Cfg: cfg, Req: req(signedAt, body, h), WantErr: nil, Key: key},
		{Name: "four minutes later", Cfg: cfg, Req: req(signedAt.Add(4*time.Minute), body, h), WantErr: nil, Key: key},
		{Name: "an hour later", Cfg: cfg, Req: req(signedAt.Add(time.Hour), body, h), WantErr: keying.ErrSignature, Key: ""},
		{Name: "an hour later, tolerance 2h", Cfg: Config{Certificates: [][]byte{cert}, Tolerance: 2 * time.Hour}, Req: req(signedAt.Add(time.Hour), body, h), WantErr: nil, Key: key},
		{Name: "body changed", Cfg: cfg, Req: req(signedAt, bytes.Replace(body, []byte("签约成功"), []byte("签约失败"), 1), h), WantErr: keying.ErrSignature, Key: ""},
		{Name: "another serial", Cfg: cfg, Req: req(signedAt, body, presettest.Hdr(&keying.Request{Header: h}, "Wechatpay-Serial", "D7CE59D1F522D702").Header), WantErr: keying.ErrSignature, Key: ""},
	}, nil)
}
