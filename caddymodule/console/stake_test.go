package console

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/platformtest"
)

// TestConsoleStakeRefundsApart: a failed Alipay payment of 309.00 CNY and
// a failed refund of 10.00 CNY on that trade. The overview's money at
// stake says "309.00 CNY received at stake" and, apart, "10.00 CNY of
// refunds owed"; never 319.00 (the money the merchant received plus the
// money it owes).
func TestConsoleStakeRefundsApart(t *testing.T) {
	k, _ := platformtest.Keys(t)
	alipay := platformtest.Alipay{Key: k}
	pub := platformtest.WriteFile(t, "alipay.pem", platformtest.PublicKeyPEM(t, &k.PublicKey))
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(order string, n int, r *http.Request) (int, string, time.Duration) {
		return 502, "database is down", 0
	})
	base := gatewaytest.StartCaddy(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+pub+`
			store memory
		}
		reverse_proxy {backend}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{backend}", be.Addr())
	paid := platformtest.AlipayNotify(recoveryAppID, "o-9", "2026120122009", "TRADE_SUCCESS", "309.00")
	refund := platformtest.AlipayNotify(recoveryAppID, "o-9", "2026120122009", "TRADE_SUCCESS", "309.00")
	refund.Set("out_biz_no", "rf-1")
	refund.Set("refund_fee", "10.00")
	refund.Set("gmt_refund", time.Now().In(time.FixedZone("CST", 8*3600)).Format(time.DateTime))
	for _, p := range []url.Values{paid, refund} {
		if r := gatewaytest.Post(t, base+"/notify", "application/x-www-form-urlencoded; charset=utf-8", alipay.Body(t, p), nil); r.Status != 502 {
			t.Fatalf("notify: %+v", r)
		}
	}
	_, page := getPage(t, base+"/console/")
	failed := stakeText(section(page, "stake"), "failed")
	for _, want := range []string{"Failed — the platform retries (2)", "309.00 CNY received at stake", "10.00 CNY of refunds owed"} {
		if !strings.Contains(failed, want) {
			t.Errorf("failed money at stake: %q, want %q", failed, want)
		}
	}
	if strings.Contains(failed, "319.00") {
		t.Errorf("failed money at stake adds the refund to the payment: %q", failed)
	}
}

var tags = regexp.MustCompile(`<[^>]*>`)

// stakeText is the text of the money at stake's box for state: tags
// dropped, white space folded.
func stakeText(sec, state string) string {
	_, box, _ := strings.Cut(sec, `id="stake-`+state+`"`)
	box, _, _ = strings.Cut(box, `<div class="stake `)
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(box, " "))), " ")
}
