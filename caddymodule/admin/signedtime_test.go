package admin

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// TestRefusedAfterFromSignedTime: refused_after counts from the time the
// platform signed the journaled notification (Wechatpay-Timestamp,
// PAYPAL-TRANSMISSION-TIME), which the backend's own check counts from,
// not from the gateway's first receipt: a copy received 4m50s after it
// was signed is refused 10 seconds later, not 5 minutes later.
func TestRefusedAfterFromSignedTime(t *testing.T) {
	first := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	signed := first.Add(-4*time.Minute - 50*time.Second)
	for _, c := range []struct {
		platform string
		header   http.Header
		want     time.Time
	}{
		{"wechatpay", http.Header{"Wechatpay-Timestamp": {strconv.FormatInt(signed.Unix(), 10)}}, signed.Add(5 * time.Minute)},
		{"paypal", http.Header{"Paypal-Transmission-Time": {signed.Format(time.RFC3339)}}, signed.Add(5 * time.Minute)},
		// No signed time in the headers: from the first receipt.
		{"wechatpay", http.Header{}, first.Add(5 * time.Minute)},
	} {
		t.Run(c.platform, func(t *testing.T) {
			p, err := unverified(c.platform)
			if err != nil {
				t.Fatal(err)
			}
			rt := app.Route{SignedFor: platforms.Lookup(c.platform).SignedFor}
			rt.Scope, rt.Platform, rt.Name = "st"+c.platform, p, "st"+c.platform+"#1"
			a := app.New()
			a.AddRoute(&rt)
			rec := &store.Record{Key: rt.Scope + ":k", State: store.StateFailed, FirstSeen: first, LastSeen: first,
				Notification: &store.Notification{Method: http.MethodPost, URI: "/notify", Header: c.header}}
			v := NewRecordView(a, "memory", rec, false)
			if v.Signature == nil || v.Signature.RefusedAfter == nil {
				t.Fatalf("signature %+v, want refused_after", v.Signature)
			}
			if !v.Signature.RefusedAfter.Equal(c.want) {
				t.Fatalf("refused_after %v, want %v (the signed time + 5m)", v.Signature.RefusedAfter, c.want)
			}
		})
	}
}
