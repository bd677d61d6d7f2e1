package bill

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/text/encoding/unicode"
)

// formats are the layouts by the preset names that read them.
var formats = map[string]*Format{"alipay": Alipay, "wechatpay": WeChatPay, "wechatpay_v2": WeChatPay, "stripe": Stripe, "paypal": PayPal}

// openBill opens a bill of the named preset's layout.
func openBill(platform string, r io.Reader) (*Reader, error) {
	return formats[platform].Open(r)
}

// readAll reads a whole bill: its rows, its summary and the error that
// ended it (nil for io.EOF).
func readAll(platform string, data []byte) ([]Row, Summary, error) {
	r, err := openBill(platform, bytes.NewReader(data))
	if err != nil {
		return nil, Summary{}, err
	}
	var rows []Row
	for {
		row, err := r.Next()
		if err == io.EOF {
			return rows, r.Summary(), nil
		}
		if err != nil {
			return rows, r.Summary(), err
		}
		rows = append(rows, row)
	}
}

// lineError asserts err is a bill Error of kind at line.
func lineError(t *testing.T, err error, kind error, line int, contains string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want a *bill.Error", err, err)
	}
	if !errors.Is(err, kind) || e.Line != line || !strings.Contains(e.Error(), contains) {
		t.Fatalf("error %q (line %d, %v), want %v at line %d containing %q", e.Error(), e.Line, e.Err, kind, line, contains)
	}
}

type generated struct {
	name     string
	platform string
	g        func() generator
	want     func(i int) Row
	layout   string
	others   bool // rows of Kind Other among them
	checked  bool
	lineOf   func(i int) int // nil: the want's Line
}

func generatedBills() []generated {
	pp := func(per int) func(int) int {
		return func(i int) int {
			if per == 0 {
				return 5 + i
			}
			// Each later part adds SF, SC, FF and four head rows.
			return 5 + i + i/per*7
		}
	}
	return []generated{
		{"alipay GBK CRLF", "alipay", func() generator { return &alipayGen{} }, alipayWant, "alipay 业务明细", false, true, nil},
		{"alipay re-saved as UTF-8 LF", "alipay", func() generator { return &alipayGen{utf8: true, nl: "\n"} }, alipayWant, "alipay 业务明细", false, true, nil},
		{"wechatpay ALL", "wechatpay", func() generator { return &wechatGen{kind: "ALL"} }, (&wechatGen{kind: "ALL"}).want, "wechatpay ALL", false, true, nil},
		{"wechatpay_v2 ALL with BOM and CRLF", "wechatpay_v2", func() generator { return &wechatGen{kind: "ALL", bom: true, crlf: true} }, (&wechatGen{kind: "ALL"}).want, "wechatpay ALL", false, true, nil},
		{"wechatpay SUCCESS", "wechatpay", func() generator { return &wechatGen{kind: "SUCCESS"} }, (&wechatGen{kind: "SUCCESS"}).want, "wechatpay SUCCESS", false, true, nil},
		{"wechatpay REFUND", "wechatpay", func() generator { return &wechatGen{kind: "REFUND"} }, (&wechatGen{kind: "REFUND"}).want, "wechatpay REFUND", false, true, nil},
		{"wechatpay early 24 columns", "wechatpay", func() generator { return &wechatGen{kind: "ALL", early: true} }, (&wechatGen{kind: "ALL", early: true}).want, "wechatpay ALL (early 24-column format)", false, true, nil},
		{"stripe dashboard", "stripe", func() generator { return &stripeGen{} }, (&stripeGen{}).want, "stripe balance history export", true, false, nil},
		{"stripe itemized", "stripe", func() generator { return &stripeGen{itemized: true} }, (&stripeGen{itemized: true}).want, "stripe itemized balance report", true, false, nil},
		{"stripe itemized JPY", "stripe", func() generator { return &stripeGen{itemized: true, currency: "jpy"} }, (&stripeGen{itemized: true, currency: "jpy"}).want, "stripe itemized balance report", true, false, nil},
		{"paypal one file", "paypal", func() generator { return &paypalGen{} }, (&paypalGen{}).want, "paypal settlement report", true, true, pp(0)},
		{"paypal in three parts", "paypal", func() generator { return &paypalGen{perFile: 100} }, (&paypalGen{}).want, "paypal settlement report", true, true, pp(100)},
	}
}

// TestGenerated reads a few hundred rows of every layout, payments and
// partial refunds, and compares each row with what was written.
func TestGenerated(t *testing.T) {
	for _, c := range generatedBills() {
		t.Run(c.name, func(t *testing.T) {
			const n = 300
			rows, sum, err := readAll(c.platform, billBytes(c.g(), n))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != n {
				t.Fatalf("%d rows, want %d", len(rows), n)
			}
			var pay, ref, oth int
			for i, row := range rows {
				want := c.want(i)
				if c.lineOf != nil {
					want.Line = c.lineOf(i)
				} else if c.platform == "stripe" {
					want.Line = 2 + i
				}
				if !reflect.DeepEqual(row, want) {
					t.Fatalf("row %d:\n got %+v\nwant %+v", i, row, want)
				}
				switch row.Kind {
				case Payment:
					pay++
				case Refund:
					ref++
				default:
					oth++
				}
			}
			if sum.Rows != n || sum.Payments != pay || sum.Refunds != ref || sum.Others != oth {
				t.Errorf("summary counts %+v, rows %d/%d/%d", sum, pay, ref, oth)
			}
			if (ref == 0) != (c.layout == "wechatpay SUCCESS") || (c.others != (oth > 0)) {
				t.Errorf("%d refunds and %d others: the fixture lacks a kind", ref, oth)
			}
			if sum.Layout != c.layout || sum.Checked != c.checked {
				t.Errorf("layout %q checked %v, want %q %v", sum.Layout, sum.Checked, c.layout, c.checked)
			}
		})
	}
}

// TestTruncatedAnywhere cuts each bill at every byte: a cut bill either
// fails or — when only a trailing comment was cut — still has every row.
// Stripe's export has no trailer, so a cut exactly at a line end cannot be
// seen there; every other cut must fail.
func TestTruncatedAnywhere(t *testing.T) {
	for _, c := range generatedBills() {
		t.Run(c.name, func(t *testing.T) {
			data := billBytes(c.g(), 12)
			full, _, err := readAll(c.platform, data)
			if err != nil {
				t.Fatal(err)
			}
			for cut := 0; cut < len(data); cut++ {
				if c.platform == "stripe" && cut > 0 && data[cut-1] == '\n' {
					continue
				}
				rows, _, err := readAll(c.platform, data[:cut])
				if err == nil && !reflect.DeepEqual(rows, full) {
					t.Fatalf("cut at %d of %d: %d rows and no error, want %d rows or an error", cut, len(data), len(rows), len(full))
				}
				if err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrMalformed) {
					t.Fatalf("cut at %d: error %v is neither ErrIncomplete nor ErrMalformed", cut, err)
				}
			}
		})
	}
}

// TestEncodings: what wraps the text is undone before any layout reads it.
func TestEncodings(t *testing.T) {
	wechat := billBytes(&wechatGen{kind: "ALL", bom: true, crlf: true}, 20)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(wechat)
	_ = zw.Close()
	stl := billBytes(&paypalGen{}, 20)
	utf16, err := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().Bytes(stl)
	if err != nil {
		t.Fatal(err)
	}
	utf16be, _ := unicode.UTF16(unicode.BigEndian, unicode.UseBOM).NewEncoder().Bytes(stl)
	for _, c := range []struct {
		name, platform string
		data           []byte
	}{
		{"wechatpay gzip (tar_type=GZIP) holding a BOM", "wechatpay", gz.Bytes()},
		{"paypal UTF-16LE with BOM", "paypal", utf16},
		{"paypal UTF-16BE with BOM", "paypal", utf16be},
		{"paypal UTF-8 BOM", "paypal", append([]byte("\xef\xbb\xbf"), stl...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, sum, err := readAll(c.platform, c.data)
			if err != nil || len(rows) != 20 || !sum.Checked {
				t.Fatalf("%d rows, checked %v, error %v", len(rows), sum.Checked, err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	zip := []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00")
	for _, c := range []struct {
		name, platform string
		data           []byte
		kind           error
		contains       string
	}{
		{"alipay zip archive", "alipay", zip, ErrMalformed, "unzip it"},
		{"broken gzip", "wechatpay", []byte{0x1f, 0x8b, 0x08, 0x00, 0x01}, ErrMalformed, "gzip"},
		{"empty alipay", "alipay", nil, ErrIncomplete, "empty"},
		{"empty wechatpay", "wechatpay", nil, ErrIncomplete, "empty"},
		{"empty stripe", "stripe", nil, ErrIncomplete, "empty"},
		{"empty paypal", "paypal", nil, ErrIncomplete, "empty"},
		{"a WeChat bill read as Alipay's", "alipay", billBytes(&wechatGen{kind: "ALL"}, 2), ErrMalformed, "not an Alipay bill"},
		{"an Alipay bill read as WeChat's", "wechatpay", billBytes(&alipayGen{utf8: true}, 2), ErrMalformed, "not a WeChat Pay trade bill"},
		{"a Stripe export read as PayPal's", "paypal", billBytes(&stripeGen{}, 2), ErrMalformed, "not a PayPal settlement report"},
		{"a PayPal report read as Stripe's", "stripe", billBytes(&paypalGen{}, 2), ErrMalformed, "not a Stripe balance-transaction export"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openBill(c.platform, bytes.NewReader(c.data))
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("error %v, want %v containing %q", err, c.kind, c.contains)
			}
		})
	}
}

// TestErrorIsFinal: after an error Next keeps returning it.
func TestErrorIsFinal(t *testing.T) {
	data := billBytes(&wechatGen{kind: "ALL"}, 3)
	data = bytes.Replace(data, []byte("`CNY,`"), []byte("`CNY,,`"), 1)
	r, err := openBill("wechatpay", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	_, first := r.Next()
	_, again := r.Next()
	if first == nil || first != again {
		t.Fatalf("first %v, again %v: want the same error twice", first, again)
	}
}

func TestLineTooLong(t *testing.T) {
	data := append(billBytes(&stripeGen{}, 2), bytes.Repeat([]byte("x"), maxLine+10)...)
	_, _, err := readAll("stripe", data)
	lineError(t, err, ErrMalformed, 4, "longer than 64 KiB")
}

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
			got, err := parseFixed([]byte(c.in), c.scale)
			if (err == nil) != c.ok || got != c.want {
				t.Fatalf("parseFixed(%q, %d) = %d, %v; want %d, ok %v", c.in, c.scale, got, err, c.want, c.ok)
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
		got, minor, err := amountOf(c.v, c.scale, c.currency)
		if got != c.want || minor != c.minor || (err == nil) != c.ok {
			t.Errorf("amountOf(%d, %d, %s) = %q %d %v; want %q %d ok %v", c.v, c.scale, c.currency, got, minor, err, c.want, c.minor, c.ok)
		}
	}
}
