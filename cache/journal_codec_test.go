package cache

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// A small notification is stored raw (zstd would cost more CPU than the
// bytes it saves), a large one compressed; both read back whole.
func TestNotificationCodec(t *testing.T) {
	small := &Notification{Method: "POST", URI: "/notify", Host: "shop.example",
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
		Body:   []byte("out_trade_no=1&trade_status=TRADE_SUCCESS"), BodySize: 41, Addr: "10.0.0.1:5000"}
	large := &Notification{Method: "POST", URI: "/notify", Host: "shop.example", TLS: true,
		Header: http.Header{"Content-Type": {"application/json"}, "Wechatpay-Serial": {"5157F09EFDC096DE15EBE81A47057A72"}},
		Body:   []byte(strings.Repeat(`{"id":"EV-2018022511223320873","resource_type":"encrypt-resource"},`, 16)), Addr: "10.0.0.1:5001"}
	large.BodySize = int64(len(large.Body))
	for _, c := range []struct {
		name    string
		n       *Notification
		version byte
	}{{"small", small, notificationRaw}, {"large", large, notificationZstd}} {
		b := encodeNotification(c.n)
		if b[0] != c.version {
			t.Errorf("%s: stored with version %d, want %d", c.name, b[0], c.version)
		}
		if c.version == notificationZstd && len(b) >= len(c.n.Body) {
			t.Errorf("%s: %d bytes stored for a %d-byte body: not compressed", c.name, len(b), len(c.n.Body))
		}
		got, err := decodeNotification(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.n) {
			t.Errorf("%s: read back %+v, want %+v", c.name, got, c.n)
		}
	}
	if _, err := decodeNotification([]byte{9, 1, 2}); err == nil {
		t.Error("an unknown version byte was read as a notification")
	}
	if _, err := decodeNotification(append([]byte{notificationZstd}, bytes.Repeat([]byte{0xff}, 8)...)); err == nil {
		t.Error("a corrupt zstd notification was read")
	}
}

// The claim script packs a record's fields into one string; values may hold
// the separator, and a damaged reply is an error, not a misread record.
func TestUnpackFields(t *testing.T) {
	got, err := unpackFields("3:a:b0:5:x\x00y:z")
	if err != nil || !reflect.DeepEqual(got, []string{"a:b", "", "x\x00y:z"}) {
		t.Fatalf("unpack: %q %v", got, err)
	}
	for _, bad := range []string{"4:abc", "x:abc", "-1:", "3abc", ":abc"} {
		if got, err := unpackFields(bad); err == nil {
			t.Errorf("%q read as %q", bad, got)
		}
	}
}
