package bill_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"

	"golang.org/x/text/encoding/unicode"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/keying/bill"
)

// counted is a layout written for these tests with what NewFormat gives a
// platform's folder: "order,amount,currency" rows and "#rows,N" at the end.
var counted = bill.NewFormat("counted", func(b *bill.Base) (bill.Parser, error) {
	if _, err := b.Line(); err != nil {
		if err == io.EOF {
			return nil, b.Whole(bill.ErrIncomplete, "the bill is empty")
		}
		return nil, b.Read(err)
	}
	b.Sum.Layout = "counted"
	return &countedRows{Base: *b}, nil
})

type countedRows struct {
	bill.Base
	f [][]byte
	n int
}

func (c *countedRows) Next() (bill.Row, error) {
	f, line, err := c.Record(c.f)
	if err == io.EOF {
		return bill.Row{}, c.Whole(bill.ErrIncomplete, "no #rows line: the bill is truncated")
	}
	if err != nil {
		return bill.Row{}, c.Read(err)
	}
	c.f = f
	if string(f[0]) == "#rows" {
		if n, ok := bill.Digits(bill.At(f, 1)); !ok || n != c.n {
			return bill.Row{}, c.Disagree(line, "#rows says %s, the bill has %d", bill.Clip(bill.At(f, 1)), c.n)
		}
		c.Sum.Checked = true
		return bill.Row{}, io.EOF
	}
	if len(f) != 3 {
		return bill.Row{}, c.BadAt(line, "%d values, want 3", len(f))
	}
	row := bill.Row{Line: line, Kind: bill.Payment, Order: string(bill.Trim(f[0])), Currency: c.Intern(f[2], true)}
	v, err := bill.ParseFixed(f[1], bill.Exponent(row.Currency))
	if err != nil || !bill.IsCurrency(row.Currency) {
		return bill.Row{}, c.BadAt(line, "amount %s %s", bill.Clip(f[1]), bill.Clip(f[2]))
	}
	row.Amount, row.Minor, _ = bill.AmountOf(v, bill.Exponent(row.Currency), row.Currency)
	c.n++
	return row, nil
}

const countedBill = "order,amount,currency\no1,9.90,usd\n\"o,2\",100,jpy\n#rows,2\n"

// TestFormatOpen: what wraps the text (gzip, a UTF-8 BOM, UTF-16) is undone
// before any layout reads it, and the Reader counts what the layout reads.
func TestFormatOpen(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("\xef\xbb\xbf" + countedBill))
	_ = zw.Close()
	le, _ := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().Bytes([]byte(countedBill))
	be, _ := unicode.UTF16(unicode.BigEndian, unicode.UseBOM).NewEncoder().Bytes([]byte(countedBill))
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"plain", []byte(countedBill)},
		{"gzip holding a BOM", gz.Bytes()},
		{"UTF-8 BOM", []byte("\xef\xbb\xbf" + countedBill)},
		{"UTF-16LE", le},
		{"UTF-16BE", be},
		{"CRLF", []byte(strings.ReplaceAll(countedBill, "\n", "\r\n"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, sum, err := billcheck.ReadAll(counted, c.data)
			if err != nil || len(rows) != 2 || rows[1].Order != "o,2" || rows[1].Amount != "100" || rows[0].Minor != 990 {
				t.Fatalf("rows %+v, error %v", rows, err)
			}
			if sum.Platform != "counted" || sum.Layout != "counted" || !sum.Checked || sum.Rows != 2 || sum.Payments != 2 {
				t.Fatalf("summary %+v", sum)
			}
		})
	}
}

// TestFormatErrors: the errors a layout builds with Base carry the
// platform, the line and their kind; a zip archive is refused with the
// format's note; after an error Next keeps returning it.
func TestFormatErrors(t *testing.T) {
	zip := []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00")
	noted := counted.WithZipNote("pass the …_counted.csv it holds")
	for _, c := range []struct {
		name     string
		f        *bill.Format
		data     []byte
		kind     error
		line     int
		contains string
	}{
		{"a zip archive", counted, zip, bill.ErrMalformed, 0, "counted bill: this is a zip archive: unzip it and pass the bill it holds"},
		{"a zip archive, with the format's note", noted, zip, bill.ErrMalformed, 0, "this is a zip archive: pass the …_counted.csv it holds"},
		{"broken gzip", counted, []byte{0x1f, 0x8b, 0x08, 0x00, 0x01}, bill.ErrMalformed, 0, "gzip"},
		{"empty", counted, nil, bill.ErrIncomplete, 0, "empty"},
		{"a bad row", counted, []byte("h\no1,9.9x,usd\n#rows,1\n"), bill.ErrMalformed, 2, `amount "9.9x"`},
		{"a cut last row", counted, []byte("h\no1,9.9"), bill.ErrIncomplete, 2, "the last line has no line end"},
		{"an unclosed quote", counted, []byte("h\n\"o1,9.90,usd\n"), bill.ErrIncomplete, 2, "never closed"},
		{"a line too long", counted, append([]byte("h\n"), bytes.Repeat([]byte("x"), 64<<10+10)...), bill.ErrMalformed, 2, "longer than 64 KiB"},
		{"the count disagrees", counted, []byte("h\no1,9.90,usd\n#rows,2\n"), bill.ErrIncomplete, 3, "#rows says"},
		{"no end", counted, []byte("h\no1,9.90,usd\n"), bill.ErrIncomplete, 0, "truncated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := billcheck.ReadAll(c.f, c.data)
			var e *bill.Error
			if !errors.As(err, &e) || !errors.Is(err, c.kind) || e.Line != c.line || e.Platform != "counted" || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("error %v, want %v at line %d containing %q", err, c.kind, c.line, c.contains)
			}
		})
	}
	r, err := counted.Open(strings.NewReader("h\no1,x,usd\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, first := r.Next()
	_, again := r.Next()
	if first == nil || first != again {
		t.Fatalf("first %v, again %v: want the same error twice", first, again)
	}
}
