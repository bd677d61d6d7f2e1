package command

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wechatpay-apiv3/wechatpay-go/services/partnerpayments"
	"github.com/wechatpay-apiv3/wechatpay-go/utils"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
)

// TestSendWechatPayServiceProvider: `send --platform wechatpay
// --sp-mchid --sub-mchid` signs a service provider's (服务商)
// notifications: the payment's resource is wechatpay-go's
// partnerpayments.Transaction (sp_mchid, sub_mchid, sp_appid, sub_appid;
// no field it does not know), the real module on a route pinned to the
// provider's mchid keys them by the sub-merchant's order
// (wechatpay:{sub_mchid}:{transaction_id}:…), and a backend verifying with
// wechatpay-go runs the payment and its refund once each.
func TestSendWechatPayServiceProvider(t *testing.T) {
	const sp, sub, id = "1230000109", "1900000109", "4200002026031400000000000042"
	keys := t.TempDir()
	if out, err := runIdem(t, "keygen", "--platform", "wechatpay", "--dir", keys); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	file := func(name string) string {
		b, err := os.ReadFile(filepath.Join(keys, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	block, _ := pem.Decode([]byte(file("wechatpay_public_key.pem")))
	if block == nil {
		t.Fatal("keygen wrote no PEM public key")
	}
	pk, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	apiV3 := file("wechatpay_apiv3_key")

	// The resource as send signs it, decrypted and read into the SDK's
	// partner model.
	n, err := buildNotification(sendOptions{platform: "wechatpay", event: "paid", id: id, order: "o-" + id, amount: 12800,
		dir: keys, flags: map[string]string{"sp-mchid": sp, "sub-mchid": sub}})
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Resource struct {
			Ciphertext     string `json:"ciphertext"`
			AssociatedData string `json:"associated_data"`
			Nonce          string `json:"nonce"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(n.body, &env); err != nil {
		t.Fatal(err)
	}
	plain, err := utils.DecryptAES256GCM(apiV3, env.Resource.AssociatedData, env.Resource.Nonce, env.Resource.Ciphertext)
	if err != nil {
		t.Fatalf("decrypting the resource: %v", err)
	}
	var tx partnerpayments.Transaction
	dec := json.NewDecoder(strings.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tx); err != nil {
		t.Fatalf("the resource is not wechatpay-go's partnerpayments.Transaction: %v\n%s", err, plain)
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if str(tx.SpMchid) != sp || str(tx.SubMchid) != sub || str(tx.SpAppid) == "" || str(tx.SubAppid) == "" ||
		str(tx.TransactionId) != id || str(tx.OutTradeNo) != "o-"+id || tx.Amount == nil || tx.Amount.Total == nil || *tx.Amount.Total != 12800 ||
		tx.Payer == nil || str(tx.Payer.SpOpenid) == "" || bytes.Contains([]byte(plain), []byte(`"mchid"`)) {
		t.Fatalf("partner resource: %s", plain)
	}

	be := sdkbackend.WechatPayPublicKey(apiV3, file("wechatpay_public_key_id"), pk.(*rsa.PublicKey))
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform wechatpay
			public_key {keys}/wechatpay_public_key.pem
			public_key_id {file.{keys}/wechatpay_public_key_id}
			secret {file.{keys}/wechatpay_apiv3_key}
			mchid `+sp+`
			store memory
		}
		reverse_proxy {backend}
	}`, "{keys}", keys, "{backend}", strings.TrimPrefix(srv.URL, "http://"))
	send := func(args ...string) (string, error) {
		return runIdem(t, append([]string{"send", "--platform", "wechatpay", "--url", g.Base + "/notify", "--dir", keys, "--id", id,
			"--amount", "12800", "--sp-mchid", sp, "--sub-mchid", sub}, args...)...)
	}
	out, err := send()
	// The SDK backend answers 204, as WeChat Pay's documentation allows.
	if err != nil || !strings.Contains(out, " 204 No Content") || strings.Contains(out, "Idempotent-Replayed") {
		t.Fatalf("first send: %v\n%s", err, out)
	}
	if !strings.Contains(out, "--sp-mchid "+sp+" --sub-mchid "+sub+")") || strings.Count(out, "--sub-mchid "+sub) != 2 {
		t.Errorf("send's lines to send it again and to refund it do not name the merchants:\n%s", out)
	}
	if out, err = send(); err != nil || !strings.Contains(out, " 204 No Content  Idempotent-Replayed: true") {
		t.Fatalf("second copy: %v\n%s", err, out)
	}
	if out, err = send("--event", "refund"); err != nil || !strings.Contains(out, " 204 No Content") {
		t.Fatalf("refund: %v\n%s", err, out)
	}
	for _, key := range []string{"wechatpay:" + sub + ":" + id + ":paid", "wechatpay:" + sub + ":" + id + ":refund:o-" + id + "-r1"} {
		if status, body := g.AdminDo(t, http.MethodGet, "/idempotency/keys/"+key); status != http.StatusOK {
			t.Errorf("key %s: %d %s", key, status, body)
		}
	}
	if be.Runs(id+":paid") != 1 || be.Runs("refund:o-"+id+"-r1:SUCCESS") != 1 || be.Total() != 2 {
		t.Fatalf("backend ran %v (refused %v), want the payment and its refund once each", be.Events(), be.Refusals())
	}

	// Half a service provider, or another platform's: refused, naming why.
	if _, err := runIdem(t, "send", "--platform", "wechatpay", "--url", g.Base+"/notify", "--dir", keys, "--sp-mchid", sp); err == nil ||
		!strings.Contains(err.Error(), "--sub-mchid") {
		t.Errorf("--sp-mchid alone: %v", err)
	}
	if _, err := runIdem(t, "send", "--platform", "alipay", "--url", g.Base+"/notify", "--sub-mchid", sub, "--sp-mchid", sp); err == nil ||
		!strings.Contains(err.Error(), "--platform wechatpay") {
		t.Errorf("--sp-mchid on alipay: %v", err)
	}
}
