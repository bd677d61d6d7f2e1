package alipay

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// TestReturnSettings: what the signed browser return is, as the route's
// `return` says. Refused by default (once verified: a forged return is
// still a signature failure), its own page key with `return display`, the
// order's paid event naming its channel with `return business`; the
// notify is the paid event whatever the setting.
func TestReturnSettings(t *testing.T) {
	k, other := platformtest.Keys(t)
	signer := platformtest.Alipay{Key: k}
	pub := platformtest.PublicKeyPEM(t, &k.PublicKey)
	const order = "2016091800538339:2026031422001437971000029351"
	ret := alipayGet(signer.Sign(t, alipayReturn()).Encode())
	forged := alipayGet(platformtest.Alipay{Key: other}.Sign(t, alipayReturn()).Encode())
	notify := alipayPost(signer.Sign(t, alipayNotify()))

	for _, setting := range []string{"", ReturnRefuse} {
		p := presettest.MustNew(t, New, Config{PublicKey: pub, Return: setting})
		_, err := p.Verify(ret)
		var ce *keying.ChannelError
		if !errors.Is(err, keying.ErrChannel) || !errors.As(err, &ce) {
			t.Fatalf("return %q: a signed return gave %v, want a ChannelError", setting, err)
		}
		if !strings.Contains(ce.Msg, "return business") || !strings.Contains(ce.Msg, "return display") || len(ce.Msg) > 120 {
			t.Errorf("return %q: the sender's line %q should be short and name both settings", setting, ce.Msg)
		}
		if _, err := p.Verify(forged); !errors.Is(err, keying.ErrSignature) {
			t.Errorf("return %q: a forged return gave %v, want a signature failure", setting, err)
		}
	}

	display := presettest.MustNew(t, New, Config{PublicKey: pub, Return: ReturnDisplay})
	n, err := display.Verify(ret)
	if err != nil {
		t.Fatal(err)
	}
	if n.Key != order+":return" || !n.Page || n.Order != "" || n.Event != "" || n.Settles != "" || n.Via != "" {
		t.Errorf("display: key %q page %v order %q event %q settles %q via %q; want its own page key, no business event",
			n.Key, n.Page, n.Order, n.Event, n.Settles, n.Via)
	}

	business := presettest.MustNew(t, New, Config{PublicKey: pub, Return: ReturnBusiness})
	n, err = business.Verify(ret)
	if err != nil {
		t.Fatal(err)
	}
	if n.Key != order+":paid" || n.Page || n.Settles != keying.SettlesPayment || n.Via != "GET /alipay/return" {
		t.Errorf("business: key %q page %v settles %q via %q; want the paid event run via GET /alipay/return", n.Key, n.Page, n.Settles, n.Via)
	}

	for _, p := range []keying.Platform{display, business, presettest.MustNew(t, New, Config{PublicKey: pub})} {
		n, err := p.Verify(notify)
		if err != nil || n.Key != order+":paid" || n.Via != "" || n.Page {
			t.Errorf("notify: %v key %q via %q page %v; want the paid event", err, n.Key, n.Via, n.Page)
		}
	}

	if _, err := New(Config{PublicKey: pub, Return: "page"}); err == nil || !strings.Contains(err.Error(), "business, display or refuse") {
		t.Errorf("return page: %v, want the three settings named", err)
	}
}
