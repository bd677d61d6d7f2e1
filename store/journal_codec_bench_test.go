package store

import (
	"net/http"
	"os"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// stripeEventNotification is a ~1 KiB Stripe payment_intent.succeeded
// event as Stripe sends it (keying/testdata/stripe_event.json: the body of
// the load comparisons' JSON case), as a journal keeps it. Its ids are unique,
// as real ones are: stripeLikeNotification pads its body with
// near-identical lines instead.
func stripeEventNotification() *Notification {
	body, err := os.ReadFile("../keying/testdata/stripe_event.json")
	if err != nil {
		panic(err)
	}
	return sampleNotification("/stripe/webhook", body, http.Header{"Content-Type": {"application/json; charset=utf-8"},
		"User-Agent":       {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
		"Stripe-Signature": {"t=1733040001,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"}})
}

// rawNotification is a notification's stored form uncompressed.
func rawNotification(n *Notification) []byte { return appendRawNotification(nil, n) }

// legacyZstd is the encoder the store wrote notifications with before the
// dictionary (version byte notificationZstd), with opts added.
func legacyZstd(tb testing.TB, opts ...zstd.EOption) *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, append([]zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

func sampleNotification(uri string, body []byte, h http.Header) *Notification {
	return &Notification{Method: "POST", URI: uri, Host: "pay.example.com", BodySize: int64(len(body)), Body: body,
		Addr: "10.0.0.5:443", TLS: true, Header: h, Route: "notify", Remote: "203.0.113.7:51234"}
}

// BenchmarkNotificationCodec: what each codec keeps of a notification and
// what it costs, on notifications of each kind (the platforms' own SDK
// samples among them; none of these bodies is in journal.dict). "shipped"
// is encodeNotification; the others are the codecs it was measured
// against, on the same bytes.
func BenchmarkNotificationCodec(b *testing.B) {
	file := func(uri, p string) *Notification {
		body, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		return sampleNotification(uri, body, http.Header{"Content-Type": {"application/json"}})
	}
	zfast := legacyZstd(b)
	zdict := legacyZstd(b, zstd.WithEncoderDictRaw(1, notificationDictBytes))
	for _, nc := range []struct {
		name string
		n    *Notification
	}{
		{"stripe_event", stripeEventNotification()},
		{"stripe_like_padded", stripeLikeNotification()},
		{"wechatpay_sdk", file("/wechatpay/notify", "../keying/testdata/wechatpay-go/body.json")},
		{"paypal_sdk", file("/paypal/webhook", "../keying/testdata/paypal-java-sdk/body.json")},
	} {
		raw := rawNotification(nc.n)
		for _, c := range []struct {
			name string
			f    func() int
		}{
			{"shipped", func() int { return len(encodeNotification(nc.n)) }},
			{"zstd_fastest", func() int { return 1 + len(zfast.EncodeAll(raw[1:], nil)) }},
			{"zstd_fastest_dict", func() int { return 1 + len(zdict.EncodeAll(raw[1:], nil)) }},
			{"s2", func() int { return 1 + len(s2.Encode(nil, raw[1:])) }},
		} {
			b.Run(nc.name+"/"+c.name, func(b *testing.B) {
				var n int
				for b.Loop() {
					n = c.f()
				}
				b.ReportMetric(float64(n), "stored_B")
				b.ReportMetric(float64(len(raw)), "raw_B")
			})
		}
	}
}
