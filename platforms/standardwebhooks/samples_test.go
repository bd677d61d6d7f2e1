package standardwebhooks

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// Tests against samples signed by the platforms themselves, taken from
// their SDKs' test suites and documentation (keying/testdata says where
// each comes from): they pin the verifiers to the platforms' real output,
// not only to internal/platformtest's reading of the documentation.

func TestStandardWebhooksReferenceVector(t *testing.T) {
	var v map[string]string
	if err := json.Unmarshal(presettest.ReadTestdata(t, "standard_webhooks.json"), &v); err != nil {
		t.Fatal(err)
	}
	req := func(sig string) *keying.Request {
		return &keying.Request{Method: http.MethodPost, Body: []byte(v["body"]), Now: time.Unix(1614265330, 0).Add(10 * time.Second),
			Header: http.Header{"Webhook-Id": {v["webhook-id"]}, "Webhook-Timestamp": {v["webhook-timestamp"]}, "Webhook-Signature": {sig}}}
	}
	bare := strings.TrimPrefix(v["secret"], "whsec_")
	presettest.RunVerifyCases(t, New, []presettest.VerifyCase[Config]{
		{Name: "reference vector", Cfg: Config{Secret: v["secret"]}, Req: req(v["webhook-signature"]), WantErr: nil, Key: v["webhook-id"]},
		{Name: "secret without whsec_", Cfg: Config{Secret: bare}, Req: req(v["webhook-signature"]), WantErr: nil, Key: v["webhook-id"]},
		{Name: "among other signatures", Cfg: Config{Secret: v["secret"]}, Req: req("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + v["webhook-signature"]), WantErr: nil, Key: v["webhook-id"]},
		{Name: "another secret", Cfg: Config{Secret: "whsec_" + strings.ToLower(bare)}, Req: req(v["webhook-signature"]), WantErr: keying.ErrSignature, Key: ""},
	}, nil)
}
