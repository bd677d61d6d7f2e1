package store

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
)

// TestS2DictEncode: every block s2DictEncode writes is read back whole by
// s2's decoder with the notification dictionary, for notifications of
// each kind and for bytes made to reach every path of the encoder
// (matches in the block, overlapping ones, matches in the dictionary up
// to its end, matches longer than a copy, literals of every length form,
// blocks past s2DictOwnMax); and a notification is kept in no more bytes
// than s2's own encoder keeps it (give or take 2%).
func TestS2DictEncode(t *testing.T) {
	file := func(uri, p string) *Notification {
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return sampleNotification(uri, body, http.Header{"Content-Type": {"application/json"}})
	}
	for name, n := range map[string]*Notification{
		"stripe_event":       stripeEventNotification(),
		"stripe_like_padded": stripeLikeNotification(),
		"wechatpay_sdk":      file("/wechatpay/notify", "../keying/testdata/wechatpay-go/body.json"),
		"paypal_sdk":         file("/paypal/webhook", "../keying/testdata/paypal-java-sdk/body.json"),
	} {
		raw := rawNotification(n)[1:]
		ours := roundTrip(t, name, raw)
		theirs := notificationDict().Encode(nil, raw)
		t.Logf("%s: %d bytes, kept in %d (s2's encoder: %d)", name, len(raw), ours, len(theirs))
		if ours > len(theirs)+len(theirs)/50 {
			t.Errorf("%s: kept in %d bytes, s2's encoder keeps it in %d", name, ours, len(theirs))
		}
	}

	rnd := rand.New(rand.NewPCG(1, 2))
	dict := notificationDictBytes
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	for i := range 3000 {
		var b []byte
		size := 16 + rnd.IntN(4096)
		if i%50 == 0 {
			size = s2DictOwnMax - 64 + rnd.IntN(128) // both sides of the bound
		}
		for len(b) < size {
			switch rnd.IntN(6) {
			case 0: // random bytes
				b = append(b, random(1+rnd.IntN(300))...)
			case 1: // a piece of the dictionary, its end included
				from := rnd.IntN(len(dict))
				if rnd.IntN(4) == 0 {
					from = len(dict) - 1 - rnd.IntN(200)
				}
				b = append(b, dict[from:min(len(dict), from+1+rnd.IntN(400))]...)
			case 2: // a repeat of what came before, overlapping or not
				if len(b) > 0 {
					from := rnd.IntN(len(b))
					n := 1 + rnd.IntN(300)
					for range n {
						b = append(b, b[from])
						from++
					}
				}
			case 3: // a run of one byte
				b = append(b, bytes.Repeat([]byte{byte(rnd.Uint32())}, 1+rnd.IntN(200))...)
			case 4: // a long literal run
				b = append(b, random(60+rnd.IntN(70000>>(rnd.IntN(8)+2)))...)
			case 5: // a short repeat far back
				if len(b) > 3000 {
					from := rnd.IntN(len(b) - 2500)
					b = append(b, b[from:from+4+rnd.IntN(8)]...)
				}
			}
		}
		roundTrip(t, "random", b[:size])
	}
}

// roundTrip encodes b after a prefix, checks that the prefix is kept and
// that s2's decoder reads b back, and returns the block's length.
func roundTrip(t *testing.T, name string, b []byte) int {
	t.Helper()
	prefix := []byte{7, 8, 9}
	z := s2DictEncode(append([]byte(nil), prefix...), b)
	if !bytes.Equal(z[:len(prefix)], prefix) {
		t.Fatalf("%s: the bytes before the block changed", name)
	}
	got, err := notificationDict().Decode(nil, z[len(prefix):])
	if err != nil {
		t.Fatalf("%s (%d bytes): %v", name, len(b), err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("%s (%d bytes): read back other bytes", name, len(b))
	}
	return len(z) - len(prefix)
}

// FuzzS2DictEncode: whatever the bytes, s2's decoder reads back what
// s2DictEncode wrote (encodeNotification checks each block so anyway;
// this finds a block it would have to write again).
func FuzzS2DictEncode(f *testing.F) {
	f.Add(rawNotification(stripeEventNotification())[1:])
	f.Add(notificationDictBytes[len(notificationDictBytes)-300:])
	f.Add(bytes.Repeat([]byte("abcdefgh"), 200))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, "fuzz", b)
	})
}
