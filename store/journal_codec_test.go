package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/idemgate/idemgate/internal/redistest"
)

// A small notification is stored raw (compressing it would cost more CPU
// than the bytes it saves), a large one compressed with s2 and the
// dictionary, one nothing compresses (base64 of ciphertext) raw; all read
// back whole, and so does one stored with zstd before the dictionary.
func TestNotificationCodec(t *testing.T) {
	small := &Notification{Method: "POST", URI: "/notify", Host: "shop.example",
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
		Body:   []byte("out_trade_no=1&trade_status=TRADE_SUCCESS"), BodySize: 41, Addr: "10.0.0.1:5000"}
	large := &Notification{Method: "POST", URI: "/notify", Host: "shop.example", TLS: true,
		Header: http.Header{"Content-Type": {"application/json"}, "Wechatpay-Serial": {"5157F09EFDC096DE15EBE81A47057A72"}},
		Body:   []byte(strings.Repeat(`{"id":"EV-2018022511223320873","resource_type":"encrypt-resource"},`, 16)), Addr: "10.0.0.1:5001"}
	large.BodySize = int64(len(large.Body))
	random := make([]byte, 3000)
	rand.NewChaCha8([32]byte{1}).Read(random)
	ciphertext := &Notification{Method: "POST", URI: "/notify", Host: "shop.example",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"resource":{"ciphertext":"` + base64.StdEncoding.EncodeToString(random) + `"}}`), Addr: "10.0.0.1:5002"}
	ciphertext.BodySize = int64(len(ciphertext.Body))
	for _, c := range []struct {
		name    string
		n       *Notification
		version byte
	}{{"small", small, notificationRaw}, {"large", large, notificationS2Dict}, {"ciphertext", ciphertext, notificationRaw}} {
		b := encodeNotification(c.n)
		if b[0] != c.version {
			t.Errorf("%s: stored with version %d, want %d", c.name, b[0], c.version)
		}
		if c.version != notificationRaw && len(b) >= len(c.n.Body) {
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
	// As the store wrote a large notification before the dictionary.
	old := legacyZstd(t).EncodeAll(rawNotification(large)[1:], []byte{notificationZstd})
	if got, err := decodeNotification(old); err != nil || !reflect.DeepEqual(got, large) {
		t.Errorf("a zstd-stored notification read back %+v, %v; want %+v", got, err, large)
	}
	if _, err := decodeNotification([]byte{9, 1, 2}); err == nil {
		t.Error("an unknown version byte was read as a notification")
	}
	if _, err := decodeNotification(append([]byte{notificationZstd}, bytes.Repeat([]byte{0xff}, 8)...)); err == nil {
		t.Error("a corrupt zstd notification was read")
	}
	if _, err := decodeNotification(append([]byte{notificationS2Dict}, bytes.Repeat([]byte{0xff}, 8)...)); err == nil {
		t.Error("a corrupt s2 notification was read")
	}
	// A damaged length must not make the reader allocate it.
	huge := binary.AppendUvarint([]byte{notificationS2Dict}, 1<<40)
	if _, err := decodeNotification(append(huge, 0, 0, 0)); err == nil {
		t.Error("an s2 notification declaring 1 TiB was read")
	}
}

// The dictionary is part of the stored format: a notification stored with
// it reads back only with the same bytes. Changing journal.dict would make
// every journal written before it unreadable; a new dictionary needs a
// version byte of its own.
func TestNotificationDictionary(t *testing.T) {
	const want = "e9e99a179c6056bb91fad86f1437a682790650f338be5a78d10469c5adc53fa8"
	d := notificationDict()
	if d == nil {
		t.Fatal("journal.dict is not a valid s2 dictionary")
	}
	// Bytes is the repeat offset and the content: all the decoder uses.
	if got := fmt.Sprintf("%x", sha256.Sum256(d.Bytes())); got != want {
		t.Fatalf("the notification dictionary has SHA-256 %s, the stored format's is %s: it must never change", got, want)
	}
	if len(notificationDictBytes) > s2.MaxDictSize {
		t.Fatalf("journal.dict: %d bytes, s2 uses at most %d", len(notificationDictBytes), s2.MaxDictSize)
	}
	if string(notificationDictBytes[notificationDictRepeat:notificationDictRepeat+7]) != `{"id":"` {
		t.Errorf("the repeat offset %d does not point at {\"id\":\"", notificationDictRepeat)
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

// A notification stored by this version reads back in every later one:
// testdata/notification-s2dict.bin is stripeEventNotification as the store
// wrote it when the dictionary came in (s2 and the dictionary, version 3).
func TestNotificationStoredForm(t *testing.T) {
	b, err := os.ReadFile("testdata/notification-s2dict.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != notificationS2Dict {
		t.Fatalf("version byte %d", b[0])
	}
	got, err := decodeNotification(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := stripeEventNotification(); !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
}

// A damaged stored notification is an error or a notification, never a
// panic or an allocation of what its bytes claim: every byte of a stored
// Stripe event flipped in turn, and random tails.
func TestNotificationDamaged(t *testing.T) {
	good := encodeNotification(stripeEventNotification())
	if good[0] != notificationS2Dict {
		t.Fatalf("stored with version %d, want s2 with the dictionary", good[0])
	}
	rnd := rand.New(rand.NewPCG(7, 7))
	damaged := 0
	for i := 1; i < len(good); i++ {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			b := slices.Clone(good)
			b[i] ^= flip
			if _, err := decodeNotification(b); err != nil {
				damaged++
			}
		}
		b := slices.Clone(good[:i])
		for range rnd.IntN(16) {
			b = append(b, byte(rnd.Uint32()))
		}
		if _, err := decodeNotification(b); err != nil {
			damaged++
		}
	}
	t.Logf("%d of %d damaged forms refused", damaged, 4*(len(good)-1))
	// Most damage must show: a flipped literal byte can still decode.
	if damaged < len(good) {
		t.Errorf("only %d of %d damaged forms were refused", damaged, 4*(len(good)-1))
	}
}

// headerLen counts what appendHeader writes, so the answered record's
// headers go in place behind their MessagePack head (newAnsweredRecord).
func TestHeaderLen(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{},
		{"Content-Type": {"text/plain"}},
		{"X-Empty": nil, "X-Many": {"a", "", strings.Repeat("v", 200)}, strings.Repeat("N", 130): {"x"}},
		{"X-Long": {strings.Repeat("v", 20000)}},
	} {
		if got, want := headerLen(h), len(appendHeader(nil, h)); got != want {
			t.Errorf("headerLen(%d names) = %d, appendHeader wrote %d", len(h), got, want)
		}
	}
}
