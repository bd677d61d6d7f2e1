// Package bill reads payment platforms' own bills (对账单) as a stream. It
// holds what every bill shares: the Reader, its Row and Summary, the error
// values, and the pieces a layout is written with (lines and quoted CSV
// records, exact amounts, times, columns found by name). Each platform's
// layout lives in its own folder (platforms/<name>/bill.go), declared with
// [NewFormat] and named by the platform's [Traits].
// Reconciliation compares what a bill says was settled with what the
// backend ran; this package only reads bills.
//
// [Format.Open] undoes what wraps the text (gzip, a UTF-8 BOM, UTF-16),
// lets the layout read the bill's head and returns a [Reader];
// [Reader.Next] returns one [Row] per detail line and io.EOF at the end —
// but only after the bill's own summary (totals, record counts) agreed
// with the rows read, where the layout has one, so a truncated download is
// an error at the end, never silently fewer rows. Memory is bounded by the
// longest line (64 KiB), not by the number of rows.
//
// Amounts are exact decimals, never floats: [Row.Amount] in major units at
// the currency's exponent ("9.90", JPY "100"), [Row.Minor] in minor units.
//
// This package must not import Caddy, nor any platform.
package bill

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
)

// Kind says what a bill row records.
type Kind uint8

const (
	// Other is any row that is neither: a revoked payment, a fee, a
	// payout, a dispute. Type and Status say which.
	Other Kind = iota
	// Payment is money received for an order.
	Payment
	// Refund is money returned for an order, in whole or in part.
	Refund
)

func (k Kind) String() string {
	switch k {
	case Payment:
		return "payment"
	case Refund:
		return "refund"
	}
	return "other"
}

// Row is one detail line of a bill.
type Row struct {
	// Line is the line of the bill the row starts on, from 1.
	Line int
	Kind Kind
	// Order is the platform's id of the payment: Alipay 支付宝交易号
	// (trade_no), WeChat Pay 微信订单号 (transaction_id), Stripe the
	// charge or payment (ch_…, py_…), PayPal the transaction id of the
	// payment. A refund row names the order it refunds (Stripe's where
	// the export does: the Dashboard's Source, the report's charge_id).
	Order string
	// Merchant is the merchant the row is for where the bill names it per
	// row: WeChat Pay 商户号 (mchid, the merchant of its notifications), or
	// its 特约商户号 (sub_mchid) in a service provider's bill.
	Merchant string
	// Provider is the service provider (服务商) of a sub-merchant's row:
	// WeChat Pay's 商户号 when 特约商户号 names the row's Merchant.
	Provider string
	// MerchantOrder is the merchant's own order number where the bill
	// has it: Alipay and WeChat Pay 商户订单号 (out_trade_no), PayPal
	// Invoice ID.
	MerchantOrder string
	// Refund is the refund's id as its notification names it: Alipay
	// 退款批次号/请求号 (out_biz_no), WeChat Pay 商户退款单号
	// (out_refund_no), Stripe re_…, PayPal the refund's transaction id.
	Refund string
	// ID is the line's own id where the bill gives one besides the
	// above: Stripe's balance transaction (txn_…), WeChat Pay's refund
	// (微信退款单号, refund_id), PayPal's transaction id.
	ID string
	// PaymentIntent is Stripe's payment_intent_id where the export has
	// the column: payment_intent.* events name the intent, not the charge.
	PaymentIntent string
	// Amount is what the row's notification carries, in major units,
	// positive for a refund too: the order amount (Alipay 订单金额,
	// WeChat Pay 订单金额, Stripe and PayPal gross) or the refund
	// (Alipay |订单金额|, WeChat Pay 申请退款金额).
	Amount string
	// Minor is Amount in the currency's minor units (fen, cents; yen).
	Minor int64
	// Settled is what the merchant is settled for the row where the bill
	// says it apart from Amount: Alipay 商家实收, WeChat Pay 应结订单金额
	// for a payment and 退款金额 for a refund. Empty otherwise.
	Settled string
	// Currency is the ISO 4217 code, upper-case; CNY for Alipay, whose
	// trade bill names none.
	Currency string
	// Time is when the platform says the row happened: Alipay 完成时间,
	// WeChat Pay 交易时间 (a refund's time of acceptance), Stripe created,
	// PayPal the completion date. Chinese bills are Beijing time.
	Time time.Time
	// Type is the platform's own word for the row: Alipay 业务类型,
	// WeChat Pay 交易状态, Stripe type or reporting category, PayPal the
	// transaction event code (T0006, T1107, …).
	Type string
	// Status is the row's status where the bill has one: WeChat Pay
	// 交易状态 (退款状态 for a refund, as at export), Stripe status,
	// PayPal transactional status.
	Status string
}

// Summary is what a Reader learned about the bill as a whole. Rows and the
// counts grow as rows are read; Checked is set when Next has returned
// io.EOF.
type Summary struct {
	// Platform is the canonical platform name ("wechatpay" for
	// wechatpay_v2 too).
	Platform string
	// Layout names the variant read, e.g. "wechatpay ALL",
	// "wechatpay SUCCESS (early 24-column format)", "alipay 业务明细".
	Layout string
	// Rows counts detail rows; Payments, Refunds and Others split them.
	Rows, Payments, Refunds, Others int
	// Checked says the bill carried totals or record counts and they
	// agreed with the rows read. Stripe's export carries none: false.
	Checked bool
	// Account is the account the bill is for where it says: Alipay
	// #账号 (pid + 0156), PayPal's account id.
	Account string
	// From and To bound the bill's period where it says (Alipay
	// 起始日期/终止日期, PayPal section dates); zero otherwise.
	From, To time.Time
}

// Errors that Open and Next return wrap one of these (errors.Is).
var (
	// ErrMalformed: the bill does not read as its platform's documented
	// layout — a wrong column count, a bad amount, a missing column.
	ErrMalformed = errors.New("malformed bill")
	// ErrIncomplete: the bill ends early (no summary, a cut last line)
	// or its own summary disagrees with its rows: treat as truncated.
	ErrIncomplete = errors.New("incomplete bill")
)

// Error is a bill that cannot be read, with the line that shows it.
type Error struct {
	Platform string
	// Line is the line at fault, from 1; 0 for the bill as a whole.
	Line int
	// Err is ErrMalformed or ErrIncomplete.
	Err error
	Msg string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s bill, line %d: %s", e.Platform, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s bill: %s", e.Platform, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Reader reads one bill. It is not safe for concurrent use.
type Reader struct {
	p   Parser
	sum Summary
	err error
}

// Parser is one platform's layout, once it has read the bill's head. Next
// returns the next detail row, or io.EOF once the bill's end has been read
// and checked.
type Parser interface {
	Next() (Row, error)
}

// Format is one platform's bill layout, which its traits name
// (Traits.Format).
type Format struct {
	name string // the platform as the summary and errors name it
	open func(b *Base) (Parser, error)
	zip  string // what to say of a zip archive
}

// NewFormat declares a platform's layout: name is the platform as
// summaries and errors name it, and open reads the bill's head from b
// (which the parser keeps, embedded) and returns the parser of its rows.
func NewFormat(name string, open func(b *Base) (Parser, error)) *Format {
	return &Format{name: name, open: open, zip: "unzip it and pass the bill it holds"}
}

// WithZipNote returns f saying note of a zip archive instead of the
// default: for a platform whose download is a zip, which file in it to
// pass.
func (f *Format) WithZipNote(note string) *Format {
	g := *f
	g.zip = note
	return &g
}

// Open reads the head of a bill of format f from r and returns a Reader
// for its rows. A gzip stream (WeChat Pay's tar_type=GZIP) is unpacked; a
// zip archive is refused with the format's note on what to pass.
func (f *Format) Open(r io.Reader) (*Reader, error) {
	rd := &Reader{sum: Summary{Platform: f.name}}
	b := &Base{platform: f.name, Sum: &rd.sum}
	src, err := sniff(r, f.zip)
	if err != nil {
		return nil, b.Whole(ErrMalformed, "%v", err)
	}
	b.l = newLines(src)
	p, err := f.open(b)
	if err != nil {
		return nil, err
	}
	rd.p = p
	return rd, nil
}

// Next returns the next row, or io.EOF at the end of a whole bill. Any
// other error is final: later calls return it again.
func (r *Reader) Next() (Row, error) {
	if r.err != nil {
		return Row{}, r.err
	}
	row, err := r.p.Next()
	if err != nil {
		r.err = err
		return Row{}, err
	}
	r.sum.Rows++
	switch row.Kind {
	case Payment:
		r.sum.Payments++
	case Refund:
		r.sum.Refunds++
	default:
		r.sum.Others++
	}
	return row, nil
}

// Summary reports what has been read so far; after Next returned io.EOF
// it is the whole bill's.
func (r *Reader) Summary() Summary { return r.sum }

// sniff undoes what surrounds the text: gzip, a BOM, UTF-16.
func sniff(r io.Reader, zipNote string) (io.Reader, error) {
	br := bufio.NewReaderSize(r, maxLine)
	head, _ := br.Peek(4) // a short or empty bill fails later, with a better message
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %v", err)
		}
		return sniffText(bufio.NewReaderSize(zr, maxLine)), nil
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return nil, errors.New("this is a zip archive: " + zipNote)
	}
	return sniffText(br), nil
}

// sniffText drops a UTF-8 BOM (WeChat Pay's captures start with one) and
// decodes UTF-16 (PayPal's older report files).
func sniffText(br *bufio.Reader) io.Reader {
	head, _ := br.Peek(3)
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		_, _ = br.Discard(3)
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		return transform.NewReader(br, unicode.BOMOverride(transform.Nop))
	}
	return br
}

// Base is what every layout shares: the bill's lines, the summary it
// fills, the platform name for errors and the strings it interns. A
// parser embeds the Base its opener is given.
type Base struct {
	// Sum is the Reader's summary: the layout sets Layout, Account, the
	// period and, at the end of a whole bill, Checked; the Reader counts
	// the rows.
	Sum      *Summary
	platform string
	l        *lines
	strs     map[string]string
}

// Line returns the bill's next line without its line end (\n or \r\n),
// valid until the next call, or io.EOF after the last one. Pass any other
// error through Read.
func (b *Base) Line() ([]byte, error) { return b.l.next() }

// Record reads one RFC 4180 record (a value may be quoted, and a quoted
// value may hold commas, doubled quotes and line ends) into dst's storage.
// It returns the fields, valid until the next call, and the number of the
// record's first line. Pass an error other than io.EOF through Read.
func (b *Base) Record(dst [][]byte) ([][]byte, int, error) { return b.l.record(dst) }

// LineNo is the number of the last line read, from 1.
func (b *Base) LineNo() int { return b.l.n }

// EOL says whether the last line read ended with a line end: a bill
// without a trailer can tell a cut last line only by this.
func (b *Base) EOL() bool { return b.l.eol }

// Platform is the platform as errors name it.
func (b *Base) Platform() string { return b.platform }

// maxInterned bounds the strings intern keeps, so memory stays O(1) in
// rows whatever the bill holds.
const maxInterned = 256

// Intern returns v as a string, shared with earlier rows: currencies,
// types and statuses repeat on every row and need not cost an allocation
// each. upper folds v to upper case first.
func (b *Base) Intern(v []byte, upper bool) string {
	if s, ok := b.strs[string(v)]; ok {
		return s
	}
	s := string(v)
	if upper {
		s = strings.ToUpper(s)
	}
	if b.strs == nil {
		b.strs = map[string]string{}
	}
	if len(b.strs) < maxInterned {
		b.strs[string(v)] = s
	}
	return s
}

// Bad is a malformed row at the current line — or, when that line is the
// last and has no line end, a bill cut short.
func (b *Base) Bad(format string, args ...any) error {
	return b.BadAt(b.l.n, format, args...)
}

// BadAt is Bad at line.
func (b *Base) BadAt(line int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line == b.l.n && !b.l.eol {
		return &Error{b.platform, line, ErrIncomplete, msg + " — the last line has no line end: the bill looks truncated"}
	}
	return &Error{b.platform, line, ErrMalformed, msg}
}

// Disagree is the bill's own summary, on line, contradicting its rows: the
// download lost rows on the way, or someone edited it.
func (b *Base) Disagree(line int, format string, args ...any) error {
	return &Error{b.platform, line, ErrIncomplete, fmt.Sprintf(format, args...)}
}

// Whole is an error of kind (ErrMalformed, ErrIncomplete) about the bill as a whole.
func (b *Base) Whole(kind error, format string, args ...any) error {
	return &Error{b.platform, 0, kind, fmt.Sprintf(format, args...)}
}

// Read turns an error of Line or Record into the bill's error; io.EOF passes.
func (b *Base) Read(err error) error {
	switch {
	case err == io.EOF:
		return err
	case errors.Is(err, errLineTooLong):
		return &Error{b.platform, b.l.n, ErrMalformed, err.Error()}
	case errors.Is(err, errOpenQuote):
		return &Error{b.platform, b.l.n, ErrIncomplete, err.Error() + ": the bill looks truncated"}
	case errors.Is(err, errQuote), errors.Is(err, errAfterQuot):
		return b.Bad("%v", err)
	}
	return fmt.Errorf("%s bill: reading: %w", b.platform, err)
}

// Columns maps a header's names to their positions: layouts find columns
// by name, since the platforms add and reorder them.
type Columns map[string]int

// Index returns the position of the first of names present, or -1.
func (c Columns) Index(names ...string) int {
	for _, n := range names {
		if i, ok := c[n]; ok {
			return i
		}
	}
	return -1
}

// Missing lists which of the required names no column has.
func (c Columns) Missing(required ...[]string) []string {
	var out []string
	for _, alts := range required {
		if c.Index(alts...) < 0 {
			out = append(out, alts[0])
		}
	}
	return out
}

// At returns field i, or nil for a column the bill lacks.
func At(f [][]byte, i int) []byte {
	if i < 0 || i >= len(f) {
		return nil
	}
	return f[i]
}

// Trim drops the spaces and TABs around a value: Alipay appends a TAB to
// identifiers so that Excel keeps them as text.
func Trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// Clip shortens a value quoted in an error message.
func Clip(b []byte) string {
	const max = 40
	if len(b) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", b[:cut])
	}
	return fmt.Sprintf("%q", b)
}
