package bill

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The layouts' own tests, and the runners every layout passes
// (internal/billcheck), live with each platform (platforms/<name>/bill_test.go).
// These test what the layouts are written with.

// TestRecord: the quoted CSV of Stripe and PayPal.
func TestRecord(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
		err      error
	}{
		{"plain", "a,b,,c", []string{"a", "b", "", "c"}, nil},
		{"quoted comma", `txn_1,"Customer, order",9.90`, []string{"txn_1", "Customer, order", "9.90"}, nil},
		{"doubled quote", `"say ""hi""",x`, []string{`say "hi"`, "x"}, nil},
		{"line end inside quotes", "\"two\r\nlines\",x", []string{"two\nlines", "x"}, nil},
		{"empty quoted and trailing comma", `"",a,`, []string{"", "a", ""}, nil},
		{"quote inside an unquoted value", `ab"c,d`, nil, errQuote},
		{"text after the closing quote", `"ab"c,d`, nil, errAfterQuot},
		{"never closed", `"abc,d`, nil, errOpenQuote},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLines(strings.NewReader(c.in + "\n"))
			f, _, err := l.record(nil)
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			var got []string
			for _, v := range f {
				got = append(got, string(v))
			}
			if c.err == nil && !reflect.DeepEqual(got, c.want) {
				t.Fatalf("fields %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseFixed(t *testing.T) {
	for _, c := range []struct {
		in    string
		scale int
		want  int64
		ok    bool
	}{
		{"9.90", 2, 990, true}, {"-0.01", 2, -1, true}, {"0.0", 2, 0, true}, {"0", 2, 0, true},
		{"5.", 2, 500, true}, {".5", 2, 50, true}, {"9.900", 2, 990, true}, {"+3", 0, 3, true},
		{"1000", 0, 1000, true}, {"0.04000", 5, 4000, true},
		{"9.901", 2, 0, false}, {"", 2, 0, false}, {"-", 2, 0, false}, {".", 2, 0, false},
		{"1,000.00", 2, 0, false}, {"1e3", 2, 0, false}, {"1.2.3", 2, 0, false}, {"¥9.90", 2, 0, false},
		{"99999999999999999999", 2, 0, false}, {" 1", 2, 0, false},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseFixed([]byte(c.in), c.scale)
			if (err == nil) != c.ok || got != c.want {
				t.Fatalf("ParseFixed(%q, %d) = %d, %v; want %d, ok %v", c.in, c.scale, got, err, c.want, c.ok)
			}
		})
	}
}

func TestAmountOf(t *testing.T) {
	for _, c := range []struct {
		v        int64
		scale    int
		currency string
		want     string
		minor    int64
		ok       bool
	}{
		{990, 2, "CNY", "9.90", 990, true},
		{-990, 2, "CNY", "9.90", 990, true},
		{5, 2, "USD", "0.05", 5, true},
		{100000, 2, "JPY", "1000", 1000, true},
		{1000, 0, "JPY", "1000", 1000, true},
		{1050, 2, "JPY", "", 0, false},
		{1234, 2, "KWD", "12.340", 12340, true},
		{0, 2, "EUR", "0.00", 0, true},
	} {
		got, minor, err := AmountOf(c.v, c.scale, c.currency)
		if got != c.want || minor != c.minor || (err == nil) != c.ok {
			t.Errorf("AmountOf(%d, %d, %s) = %q %d %v; want %q %d ok %v", c.v, c.scale, c.currency, got, minor, err, c.want, c.minor, c.ok)
		}
	}
}

func FuzzParseFixed(f *testing.F) {
	for _, s := range []string{"9.90", "-0.01", "0.0", "1000", "0.04000", "9.901", "", "1e3", "+.5"} {
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, scale uint8) {
		sc := int(scale % 6)
		v, err := ParseFixed([]byte(s), sc)
		if err != nil {
			return
		}
		back, err := ParseFixed([]byte(FormatFixed(v, sc)), sc)
		if err != nil || back != v {
			t.Fatalf("%q at scale %d: %d formats as %q, which reads back as %d (%v)", s, sc, v, FormatFixed(v, sc), back, err)
		}
	})
}
