package paypal

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/unicode"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/stripe/stripebill"
)

// PayPal settlement reports written by hand to the documented records
// (see bill.go); the values are ours.

const (
	ppRH = `"RH",2026/10/04 05:00:00 -0700,"A","4X5Y6ZACCOUNT",009`
	ppFH = `"FH",01`
	ppSH = `"SH",2026/10/02 09:00:00 -0700,2026/10/03 08:59:59 -0700,"4X5Y6ZACCOUNT",""`
	// A payment, then a partial refund of it in yen: "100,00 yen … represented as 10000".
	ppPay    = `"SB","9PX00000000000001","M1","","","T0006",2026/10/02 10:00:00 -0700,2026/10/02 10:00:05 -0700,"CR",2500,"USD","DR",103,"USD","","buyer@example.com","",""`
	ppRefund = `"SB","7RX00000000000002","M1","9PX00000000000001","TXN","T1107",2026/10/02 11:00:00 -0700,2026/10/02 11:00:00 -0700,"DR",1000,"USD","CR",40,"USD","","buyer@example.com","",""`
	ppYen    = `"SB","3HD08833MR473623T","46239229.0","1V551844CE5526421","TXN","T1107",2017/03/22 09:34:59 -0700,2017/03/22 09:34:59 -0700,"DR",15000,"JPY","CR",4300,"JPY","","x","",""`
	ppOut    = `"SB","5WX00000000000003","","","","T0400",2026/10/02 12:00:00 -0700,2026/10/02 12:00:00 -0700,"DR",1397,"USD","CR",0,"USD","","","",""`
)

func ppBill(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

func ppFoot(sc, rc int) []string {
	return []string{`"SF","USD",2500,2397,0,103`, `"SC",` + strconv.Itoa(sc), `"RF","USD",2500,2397,0,103`, `"RC",` + strconv.Itoa(rc), `"FF",` + strconv.Itoa(sc+9)}
}

func TestPayPalDocumentedLayout(t *testing.T) {
	pdt := time.FixedZone("", -7*3600)
	body := append([]string{ppRH, ppFH, ppSH, paypalCH, ppPay, ppRefund, ppYen, ppOut}, ppFoot(4, 4)...)
	want := []bill.Row{
		{Line: 5, Kind: bill.Payment, Order: "9PX00000000000001", MerchantOrder: "M1", ID: "9PX00000000000001", Amount: "25.00", Minor: 2500,
			Currency: "USD", Time: time.Date(2026, 10, 2, 10, 0, 5, 0, pdt).UTC(), Type: "T0006"},
		{Line: 6, Kind: bill.Refund, Order: "9PX00000000000001", MerchantOrder: "M1", Refund: "7RX00000000000002", ID: "7RX00000000000002",
			Amount: "10.00", Minor: 1000, Currency: "USD", Time: time.Date(2026, 10, 2, 11, 0, 0, 0, pdt).UTC(), Type: "T1107"},
		{Line: 7, Kind: bill.Refund, Order: "1V551844CE5526421", MerchantOrder: "46239229.0", Refund: "3HD08833MR473623T", ID: "3HD08833MR473623T",
			Amount: "150", Minor: 150, Currency: "JPY", Time: time.Date(2017, 3, 22, 9, 34, 59, 0, pdt).UTC(), Type: "T1107"},
		{Line: 8, Kind: bill.Other, Order: "5WX00000000000003", ID: "5WX00000000000003", Amount: "13.97", Minor: 1397,
			Currency: "USD", Time: time.Date(2026, 10, 2, 12, 0, 0, 0, pdt).UTC(), Type: "T0400"},
	}
	single := strings.Replace(paypalCH, "Transaction  Debit", "Transaction Debit", 1)
	for _, c := range []struct {
		name string
		bill []byte
	}{
		{"one file", ppBill(body...)},
		{"the column name with one space, CRLF", []byte(strings.ReplaceAll(string(ppBill(append([]string{ppRH, ppFH, ppSH, single}, body[4:]...)...)), "\n", "\r\n"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			sum := billcheck.Rows(t, billFormat, c.bill, want)
			if !sum.Checked || sum.Account != "4X5Y6ZACCOUNT" || !sum.From.Equal(time.Date(2026, 10, 2, 9, 0, 0, 0, pdt)) {
				t.Errorf("summary %+v", sum)
			}
		})
	}
}

func TestPayPalMalformed(t *testing.T) {
	head := []string{ppRH, ppFH, ppSH, paypalCH}
	report := func(body ...string) []byte { return ppBill(append(append([]string{}, head...), body...)...) }
	foot := ppFoot(1, 1)
	for _, c := range []struct {
		name     string
		bill     []byte
		kind     error
		line     int
		contains string
	}{
		{"SC counts another number", report(append([]string{ppPay}, ppFoot(2, 1)...)...), bill.ErrIncomplete, 7, "section record count (SC) says 2 rows, the section has 1"},
		{"RC counts another number", report(append([]string{ppPay}, ppFoot(1, 3)...)...), bill.ErrIncomplete, 9, "report record count (RC) says 3"},
		{"cut before the footers", report(ppPay, ppRefund), bill.ErrIncomplete, 0, "no file footer (FF)"},
		{"one part of a split report", report(ppPay, `"SF","USD",0,0,0,0`, `"SC",1`, `"FF",10`), bill.ErrIncomplete, 0, "pass all parts in order"},
		{"an amount with a decimal point", report(append([]string{strings.Replace(ppPay, ",2500,", ",25.00,", 1)}, foot...)...), bill.ErrMalformed, 5, "punctuation"},
		{"yen with cents", report(append([]string{strings.Replace(ppYen, ",15000,", ",15050,", 1)}, foot...)...), bill.ErrMalformed, 5, "JPY"},
		{"neither CR nor DR", report(append([]string{strings.Replace(ppPay, `"CR",2500`, `"XX",2500`, 1)}, foot...)...), bill.ErrMalformed, 5, "neither CR nor DR"},
		{"a bad date", report(append([]string{strings.Replace(ppPay, "2026/10/02 10:00:05 -0700", "Oct 2 2026", 1)}, foot...)...), bill.ErrMalformed, 5, "date"},
		{"a row of the wrong width", report(append([]string{ppPay + `,"x"`}, foot...)...), bill.ErrMalformed, 5, "19 values where the column header has 18"},
		{"an unknown record", report(`"ZZ",1`), bill.ErrMalformed, 5, "unknown record type"},
		{"a transaction before the column header", ppBill(ppRH, ppFH, ppSH, ppPay), bill.ErrMalformed, 4, "before the column header"},
		{"a row after the file footer", report(append(append([]string{ppPay}, foot...), ppPay)...), bill.ErrMalformed, 11, "after the file footer"},
		{"a column header without amounts", ppBill(ppRH, `"CH","Transaction ID"`), bill.ErrMalformed, 2, "no Transaction Event Code"},
		{"the website's Activity download", ppBill(`"Date","Time","TimeZone","Name","Type","Status","Currency","Gross","Fee","Net","Transaction ID"`),
			bill.ErrMalformed, 1, "Settlement Report"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := billcheck.ReadAll(billFormat, c.bill)
			billcheck.LineError(t, err, c.kind, c.line, c.contains)
		})
	}
}

// lineOf is the line of generated row i in a report split over parts of
// per rows (0: one file): each later part adds SF, SC, FF and four head
// rows.
func lineOf(per int) func(int) int {
	return func(i int) int {
		if per == 0 {
			return 5 + i
		}
		return 5 + i + i/per*7
	}
}

// billCases are the generated reports the runners every layout passes read.
var billCases = []billcheck.Case{
	{Name: "paypal one file", Format: billFormat, Gen: func() billcheck.Generator { return &paypalGen{} },
		Want: (&paypalGen{}).want, Layout: "paypal settlement report", Others: true, Checked: true, LineOf: lineOf(0)},
	{Name: "paypal in three parts", Format: billFormat, Gen: func() billcheck.Generator { return &paypalGen{perFile: 100} },
		Want: (&paypalGen{}).want, Layout: "paypal settlement report", Others: true, Checked: true, LineOf: lineOf(100)},
}

// TestBillGenerated reads a few hundred generated rows, payments, partial
// refunds and withdrawals, and compares each row with what was written.
func TestBillGenerated(t *testing.T) { billcheck.Generated(t, billCases) }

// TestBillTruncatedAnywhere cuts each report at every byte: every cut
// fails.
func TestBillTruncatedAnywhere(t *testing.T) { billcheck.TruncatedAnywhere(t, billCases) }

// TestBillEncodings: the older reports' UTF-16 and a UTF-8 BOM are undone
// before the layout reads the report.
func TestBillEncodings(t *testing.T) {
	stl := billcheck.Bytes(&paypalGen{}, 20)
	utf16, err := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().Bytes(stl)
	if err != nil {
		t.Fatal(err)
	}
	utf16be, _ := unicode.UTF16(unicode.BigEndian, unicode.UseBOM).NewEncoder().Bytes(stl)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"paypal UTF-16LE with BOM", utf16},
		{"paypal UTF-16BE with BOM", utf16be},
		{"paypal UTF-8 BOM", append([]byte("\xef\xbb\xbf"), stl...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, sum, err := billcheck.ReadAll(billFormat, c.data)
			if err != nil || len(rows) != 20 || !sum.Checked {
				t.Fatalf("%d rows, checked %v, error %v", len(rows), sum.Checked, err)
			}
		})
	}
}

func TestBillOpenErrors(t *testing.T) {
	at := time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC)
	stripe := billtest.Bytes(func(w io.Writer) billtest.Writer { return stripebill.NewWriter(w, false) }, []billtest.Row{
		{Kind: billtest.Payment, Order: "ch_1", MerchantOrder: "M1", Amount: "97.00", Currency: "EUR", Time: at},
		{Kind: billtest.Payment, Order: "ch_2", MerchantOrder: "M2", Amount: "12.50", Currency: "EUR", Time: at},
	})
	billcheck.OpenErrors(t, billFormat, []billcheck.OpenError{
		{Name: "empty paypal", Kind: bill.ErrIncomplete, Contains: "empty"},
		{Name: "a Stripe export read as PayPal's", Data: stripe, Kind: bill.ErrMalformed, Contains: "not a PayPal settlement report"},
	})
}

func FuzzPayPalBill(f *testing.F) {
	billcheck.Fuzz(f, billFormat, true, billcheck.Bytes(&paypalGen{}, 6), billcheck.Bytes(&paypalGen{perFile: 2}, 5),
		ppBill(append([]string{ppRH, ppFH, ppSH, paypalCH, ppPay, ppRefund, ppYen, ppOut}, ppFoot(4, 4)...)...))
}

// BenchmarkBillMillionRows parses a generated report of 1M rows (see
// billcheck.MillionRows for the figures it reports).
func BenchmarkBillMillionRows(b *testing.B) { billcheck.MillionRows(b, millionBill()) }

// BenchmarkBillGenerate measures the generator the tests use.
func BenchmarkBillGenerate(b *testing.B) { billcheck.Generate(b, millionBill()) }

func millionBill() []billcheck.Case {
	c := billCases[0]
	c.Name = "paypal"
	return []billcheck.Case{c}
}
