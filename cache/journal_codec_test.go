package cache

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
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

// The claim script packs a record's fields into one MessagePack array;
// values may hold any byte, and a damaged reply is an error, not a
// misread record. The packed form is the one a real Redis writes.
func TestUnpackFields(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	ctx := context.Background()
	long := strings.Repeat("b", 70000) // past str16
	want := []string{"a:b", "", "x\x00y:z", "", strings.Repeat("a", 31), strings.Repeat("a", 32), strings.Repeat("a", 300), long}
	p, err := c.Eval(ctx, `return cmsgpack.pack({ARGV[1], false, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]})`, nil,
		want[0], want[2], want[3], want[4], want[5], want[6], want[7]).Text()
	if err != nil {
		t.Fatal(err)
	}
	got, err := unpackFields(p)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("unpack: %d fields, %v", len(got), err)
	}
	// Every field of the record, as the claim script returns it.
	var r []any
	for i := range 20 {
		r = append(r, strconv.Itoa(i))
	}
	p, err = c.Eval(ctx, `return cmsgpack.pack(ARGV)`, nil, r...).Text()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := unpackFields(p); err != nil || len(got) != 20 || got[19] != "19" {
		t.Fatalf("array16: %q %v", got, err)
	}
	for _, bad := range []string{"", "\x91", "\x92\xa1a", "\x91\xa3ab", "\x91\x01", "\x90x", "\x91\xda\x00", "\xdc\x00"} {
		if got, err := unpackFields(bad); err == nil {
			t.Errorf("%q read as %q", bad, got)
		}
	}
}
