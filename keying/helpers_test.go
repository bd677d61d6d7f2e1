package keying

import (
	"crypto/rsa"
	"errors"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// Helpers of keying's own tests; the platforms' tests share
// internal/presettest.

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// testCert is a self-signed certificate for k with the given serial,
// valid around testNow.
func testCert(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	return platformtest.CertificateValid(t, k, serial, cn, testNow.Add(-24*time.Hour), testNow.Add(365*24*time.Hour))
}

func bigInt(n int64) *big.Int { return big.NewInt(n) }

// successCase is a backend answer and whether Success must take it as
// "handled".
type successCase struct {
	status int
	body   string
	want   bool
}

func TestMaterialIsUnambiguous(t *testing.T) {
	pairs := [][2][]string{
		{{"a,b", "c"}, {"a", "b,c"}},
		{{"a", ""}, {"", "a"}},
		{{`"`, ""}, {"", `"`}},
		{{"a"}, {"a", ""}},
	}
	for _, p := range pairs {
		if Material(p[0]...) == Material(p[1]...) {
			t.Errorf("Material(%q) == Material(%q)", p[0], p[1])
		}
	}
	if Material("1", "x") != Material("1", "x") {
		t.Error("Material is not deterministic")
	}
	if Material() != "[]" {
		t.Errorf("Material() = %s", Material())
	}
}

func TestUnixTimestamp(t *testing.T) {
	now := testNow
	sec := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	cases := []struct {
		v         string
		olderOnly bool
		ok        bool
	}{
		{sec(0), false, true},
		{sec(-5 * time.Minute), false, true},
		{sec(5 * time.Minute), false, true},
		{sec(-5*time.Minute - time.Second), false, false},
		{sec(5*time.Minute + time.Second), false, false},
		{sec(5*time.Minute + time.Second), true, true},
		{"999999999999", false, false}, // far future must not overflow into "fresh"
		{"9223372036854775807", false, false},
		{"9223372036854775807", true, false},
		{"-1", false, false},
		{"", false, false},
		{"1e9", false, false},
		{" 1", false, false},
	}
	for _, c := range cases {
		_, err := UnixTimestamp("p", "ts", c.v, now, DefaultTolerance, c.olderOnly)
		if (err == nil) != c.ok {
			t.Errorf("unixTimestamp(%q, olderOnly=%v) = %v, want ok=%v", c.v, c.olderOnly, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrSignature) {
			t.Errorf("error does not wrap ErrSignature: %v", err)
		}
	}
}

// NewNotification's fields read its request, as NewFields' do, and the
// notification and its fields are one allocation.
func TestNewNotification(t *testing.T) {
	r := &Request{Body: []byte("out_trade_no=o-1&total_amount=9.90")}
	n := NewNotification(r)
	if v, ok, err := n.Fields.Form("out_trade_no"); v != "o-1" || !ok || err != nil {
		t.Errorf("Form(out_trade_no) = %q %v %v", v, ok, err)
	}
	if a := testing.AllocsPerRun(100, func() { _ = NewNotification(r) }); a != 1 {
		t.Errorf("NewNotification allocates %v times, want 1", a)
	}
}
