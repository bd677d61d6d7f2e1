package caddymodule

import (
	"fmt"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestRotatingKeys: a WeChat Pay route with a platform public key and a
// pinned platform certificate that expires in 10 days names both keys in
// its start-up line, warns about the certificate at start (and again on
// its next check), and counts which key verified each notification.
func TestRotatingKeys(t *testing.T) {
	pubKey, certKey := platformtest.Keys(t)
	serial := big.NewInt(0x5157F09E)
	expires := time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	dir := t.TempDir()
	pubFile := platformtest.WriteFile(t, "pub.pem", platformtest.PublicKeyPEM(t, &pubKey.PublicKey))
	certFile := platformtest.WriteFile(t, "cert.pem",
		platformtest.CertificateValid(t, certKey, serial, "Wechatpay", time.Now().Add(-time.Hour), expires))
	logFile := filepath.Join(dir, "caddy.log")
	be := newBackend(t)
	be.setAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 204, "", 0 })
	admin := reservePort(t)
	base := gatewaytest.StartCaddyWith(t, gatewaytest.Globals{Admin: admin, Log: "output file " + logFile + "\n\t\tformat json\n\t\tlevel INFO"}, `
	handle /wx {
		idempotency {
			platform wechatpay
			public_key `+pubFile+`
			public_key_id `+testWxPubKeyID+`
			certificate `+certFile+`
			secret `+testWxAPIv3Key+`
			scope wx-rotation
			store memory
		}
		reverse_proxy `+be.addr()+`
	}`)
	g := gateway{base: base, admin: admin}
	certSerial := platformtest.SerialHex(serial)

	ready := logLines(t, logFile, "idempotency handler ready")
	if len(ready) != 1 || fmt.Sprint(ready[0]["keys"]) != fmt.Sprint([]any{testWxPubKeyID, certSerial}) {
		t.Fatalf("start-up line: %v, want keys [%s %s]", ready, testWxPubKeyID, certSerial)
	}
	warned := logLines(t, logFile, "pinned certificate expires soon")
	if len(warned) != 1 {
		t.Fatalf("%d expiry warnings at start, want 1", len(warned))
	}
	w := warned[0]
	if w["level"] != "warn" || w["key"] != certSerial || w["days_left"] != float64(10) {
		t.Errorf("expiry warning %v: want warn, key %s, 10 days left", w, certSerial)
	}
	if na, _ := time.Parse(time.RFC3339, fmt.Sprint(w["not_after"])); !na.Equal(expires) {
		t.Errorf("expiry warning's not_after %v, want %v", w["not_after"], expires)
	}
	rewatch(t, onlyHandler(t), withExpiryCheckEvery(300*time.Millisecond))
	eventually(t, 5*time.Second, "the next check's warning", func() bool {
		return len(logLines(t, logFile, "pinned certificate expires soon")) >= 2
	})

	send := func(k platformtest.WechatPay, order string) {
		t.Helper()
		body, hdr := k.Notification(t, platformtest.WechatPayEvent{ID: "EV-" + order, EventType: "TRANSACTION.SUCCESS",
			Resource: platformtest.WechatPayTransaction("4200"+order, order, "SUCCESS", 100), Nonce: "fdasflkja484", CreateTime: time.Now()})
		hdr.Set("Content-Type", "application/json")
		if r := post(t, base+"/wx", "application/json", string(body), hdr); r.status != 204 {
			t.Fatalf("%s: %d %q", order, r.status, r.body)
		}
	}
	send(platformtest.WechatPay{Key: pubKey, Serial: testWxPubKeyID, APIv3Key: testWxAPIv3Key}, "rot-1")
	send(platformtest.WechatPay{Key: certKey, Serial: certSerial, APIv3Key: testWxAPIv3Key}, "rot-2")
	send(platformtest.WechatPay{Key: certKey, Serial: strings.ToLower(certSerial), APIv3Key: testWxAPIv3Key}, "rot-3")

	s, text := scrape(t, g)
	wantSample(t, s, `idemgate_verified_total{key="`+testWxPubKeyID+`",platform="wechatpay",scope="wx-rotation"}`, 1)
	wantSample(t, s, `idemgate_verified_total{key="`+certSerial+`",platform="wechatpay",scope="wx-rotation"}`, 2)
	// The process's metrics hold other tests' series; this route's scope
	// is its own.
	if n := len(filterLabel(s, "idemgate_verified_total", `scope="wx-rotation"`)); n != 2 {
		t.Errorf("%d idemgate_verified_total series of the route, want one per configured key:\n%s", n, text)
	}
	var byKey []string
	for _, l := range logLines(t, logFile, "idempotency decision") {
		byKey = append(byKey, fmt.Sprint(l["verified_by"]))
	}
	if fmt.Sprint(byKey) != fmt.Sprint([]string{testWxPubKeyID, certSerial, certSerial}) {
		t.Errorf("decisions' verified_by: %v", byKey)
	}
}

// filterLabel is filter narrowed to the samples whose labels hold label.
func filterLabel(s map[string]float64, prefix, label string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range filter(s, prefix) {
		if strings.Contains(k, label) {
			out[k] = v
		}
	}
	return out
}
