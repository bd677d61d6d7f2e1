package console

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/sdkbackend"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestConsoleExpiredSignatureBrowser: in a real headless Chromium with
// JavaScript off, on the embedded store. A WeChat Pay v3 notification is
// acked, its backend is down until the platform's signature is past its 5
// minutes, then wechatpay-go refuses the delivery: the key is dead at once.
// The overview lists it under Dead (not Failed) with its CNY 9.90 in the
// dead money at stake, though give_up (24h) is far off; its page reads dead
// and says why.
func TestConsoleExpiredSignatureBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	k, _ := platformtest.Keys(t)
	pubFile := platformtest.WriteFile(t, "platform_public.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	const apiV3 = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"
	wx := platformtest.WechatPay{Key: k, Serial: "PUB_KEY_ID_01", APIv3Key: apiV3}
	be := sdkbackend.WechatPayPublicKey(apiV3, "PUB_KEY_ID_01", &k.PublicKey)
	be.SetDown(true)
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)
	base := gatewaytest.StartCaddy(t, `
	handle /notify {
		idempotency {
			platform wechatpay
			public_key `+pubFile+`
			public_key_id PUB_KEY_ID_01
			secret `+apiV3+`
			store embedded `+filepath.Join(t.TempDir(), "keys.db")+`
			deliver async {
				to `+srv.URL+`
				retry 200ms 500ms
			}
		}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`)

	signed := time.Now().Add(-4*time.Minute - 56*time.Second)
	ev := platformtest.WechatPayEvent{ID: "n-con", EventType: "TRANSACTION.SUCCESS",
		Resource: platformtest.WechatPayTransaction("4200888", "o-con", "SUCCESS", 990)}
	body := wx.Body(t, ev)
	if r := gatewaytest.Post(t, base+"/notify", "application/json", string(body), wx.Header(t, body, signed)); r.Status != 200 {
		t.Fatalf("the notification signed 4m56s ago: %d %q, want the ack", r.Status, r.Body)
	}
	time.Sleep(time.Until(signed.Truncate(time.Second).Add(5*time.Minute + 1500*time.Millisecond)))
	be.SetDown(false)
	const key = "wechatpay:1230000109:4200888:paid"
	gatewaytest.Eventually(t, 10*time.Second, "the key to be dead", func() bool {
		rec := gatewaytest.Record(t, key)
		return rec != nil && rec.StateAt(gatewaytest.App(t).Now(), gatewaytest.App(t).WindowOf(key)) == "dead"
	})

	bctx, run, text := headlessBrowser(t)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		saveShot(t, artefactDir(t), name, png)
	}
	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#dead")))
	if d := text("#dead"); !strings.Contains(d, "Dead (1)") || !strings.Contains(d, key) {
		t.Errorf("Dead list: %q, want the key", d)
	}
	if f := text("#failed"); !strings.Contains(f, "Failed (0)") || strings.Contains(f, key) {
		t.Errorf("Failed list: %q, want it empty", f)
	}
	if d := text("#stake-dead"); !strings.Contains(d, "(1)") || !strings.Contains(d, "9.90 CNY received at stake") {
		t.Errorf("dead money at stake: %q, want 9.90 CNY", d)
	}
	if f := text("#stake-failed"); !strings.Contains(f, "(0)") {
		t.Errorf("failed money at stake: %q, want nothing", f)
	}
	assertFits(t, bctx, "overview with a dead key")
	shot("console-signature-expired-dead.png")

	run("key", chromedp.Click(chromedp.CSS(`#dead a[href*="4200888"]`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if tl := text("#timeline"); !strings.Contains(tl, "the platform's signature expired") {
		t.Errorf("timeline: %q, want the expired signature", tl)
	}
	if m := text("main"); !strings.Contains(m, "dead") {
		t.Errorf("key page: %q, want it dead", m[:min(len(m), 400)])
	}
	if m := text("main"); !strings.Contains(m, "the gateway stopped at once") || strings.Contains(m, "give_up") {
		t.Errorf("key page: %q, want the expired signature as the reason, not give_up", m[:min(len(m), 600)])
	}
	assertFits(t, bctx, "dead key page")
	shot("console-signature-expired-key.png")
}
