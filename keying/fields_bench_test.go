package keying

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkFieldsJSON: one top-level field of a ~1 KiB notification, read
// by Fields.JSON (validate, then walk) and by decoding the whole body (how
// it was read before).
func BenchmarkFieldsJSON(b *testing.B) {
	body := benchNotification()
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v, ok, err := NewFields(&Request{Method: http.MethodPost, Body: body}).JSON("id"); err != nil || !ok || v == "" {
				b.Fatal(v, ok, err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v, ok, valid := jsonAtByDecoding(body, "id"); !valid || !ok || v == "" {
				b.Fatal(v, ok)
			}
		}
	})
}

// benchNotification is a ~1 KiB JSON payment notification.
func benchNotification() []byte {
	var s strings.Builder
	s.WriteString(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3NG8","amount":4990,"metadata":{`)
	for i := 0; s.Len() < 1000; i++ {
		fmt.Fprintf(&s, `"line_%d":"sku-%04d",`, i, i*37)
	}
	s.WriteString(`"end":"1"}}}}`)
	return []byte(s.String())
}
