package alipay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
)

// An Alipay 业务明细 bill written by hand to the documented layout (see
// bill.go); the values are ours.
var alipayHead = []string{
	"#支付宝业务明细查询",
	"#账号：[20880211096256330156]",
	"#起始日期：[2026年10月03日 00:00:00]   终止日期：[2026年10月04日 00:00:00]",
	"#-----------------------------------------业务明细列表----------------------------------------",
	alipayHeader,
}

const (
	aliPay    = "2026100322001458860515315453\t,M1\t,交易\t,会员续费,2026-10-03 10:55:16,2026-10-03 10:55:23,alipay_store\t,alipay_store\t,alipay\t,\t,*津水(602***@qq.com)\t,9.90,9.90,0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,\t,0.00,0.00,"
	aliRefund = "2026100322001458860515315453\t,M1\t,退款\t,会员续费,2026-10-03 10:55:16,2026-10-03 11:26:55,alipay_store\t,alipay_store\t,alipay\t,\t,*津水(602***@qq.com)\t,-4.00,-4.00,0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,re_20261003112655\t,0.00,0.00,"
	aliEnd    = "#-----------------------------------------业务明细列表结束------------------------------------"
	aliExport = "#导出时间：[2026年10月04日 05:46:49]"
)

// aliBill joins lines with CRLF and encodes them in GBK, as the download is.
func aliBill(t *testing.T, lines ...string) []byte {
	t.Helper()
	b, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(strings.Join(lines, "\r\n") + "\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func aliLines(body ...string) []string { return append(append([]string{}, alipayHead...), body...) }

// TestAlipayGBKBytes pins the two 业务类型 values as GBK bytes written by
// hand (交 BDBB 易 D2D7, 退 CDCB 款 BFEE), so rows are told apart without
// trusting the encoder the other tests use.
func TestAlipayGBKBytes(t *testing.T) {
	for s, want := range map[string][]byte{"交易": gbkPayment, "退款": gbkRefund} {
		got, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(s))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("GBK(%s) = % x, the parser compares with % x", s, got, want)
		}
	}
	data := aliBill(t, aliLines(aliPay, aliRefund, aliEnd,
		"#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元", "#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元")...)
	for _, b := range [][]byte{{0xbd, 0xbb, 0xd2, 0xd7}, {0xcd, 0xcb, 0xbf, 0xee}} {
		if !bytes.Contains(data, b) {
			t.Fatalf("the GBK bill lacks % x", b)
		}
	}
	rows, _, err := billcheck.ReadAll(billFormat, data)
	if err != nil || len(rows) != 2 || rows[0].Kind != bill.Payment || rows[1].Kind != bill.Refund || rows[1].Type != "退款" {
		t.Fatalf("rows %+v, error %v", rows, err)
	}
}

func TestAlipayDocumentedLayout(t *testing.T) {
	paid := bill.Row{Line: 6, Kind: bill.Payment, Order: "2026100322001458860515315453", MerchantOrder: "M1", Amount: "9.90",
		Minor: 990, Settled: "9.90", Currency: "CNY", Time: time.Date(2026, 10, 3, 10, 55, 23, 0, keying.Beijing), Type: "交易"}
	refund := bill.Row{Line: 7, Kind: bill.Refund, Order: "2026100322001458860515315453", MerchantOrder: "M1",
		Refund: "re_20261003112655", Amount: "4.00", Minor: 400, Settled: "4.00", Currency: "CNY",
		Time: time.Date(2026, 10, 3, 11, 26, 55, 0, keying.Beijing), Type: "退款"}
	totals := []string{aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元", "#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元", aliExport}
	for _, c := range []struct {
		name string
		bill []byte
		want []bill.Row
	}{
		{"GBK, CRLF: a payment and its partial refund", aliBill(t, aliLines(append([]string{aliPay, aliRefund}, totals...)...)...), []bill.Row{paid, refund}},
		{"re-saved as UTF-8 with LF", []byte(strings.Join(aliLines(append([]string{aliPay, aliRefund}, totals...)...), "\n") + "\n"), []bill.Row{paid, refund}},
		{"the older wording of the totals", aliBill(t, aliLines(aliPay, aliRefund, aliEnd,
			"#交易合计：1笔，交易金额共9.90元，优惠金额共0.00元", "#退款合计：1笔，交易退款金额共-4.00元，优惠退款金额共0.00元")...), []bill.Row{paid, refund}},
		{"no refunds, so no #退款合计 needed", aliBill(t, aliLines(aliPay, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元")...), []bill.Row{paid}},
		{"an empty day", aliBill(t, aliLines(aliEnd, "#交易合计：0笔，商家实收共0.00元，商家优惠共0.00元", "#退款合计：0笔，商家实收退款共0.00元，商家优惠退款共0.00元")...), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sum := billcheck.Rows(t, billFormat, c.bill, c.want)
			from := time.Date(2026, 10, 3, 0, 0, 0, 0, keying.Beijing)
			if !sum.Checked || sum.Account != "20880211096256330156" || !sum.From.Equal(from) || !sum.To.Equal(from.AddDate(0, 0, 1)) {
				t.Errorf("summary %+v", sum)
			}
		})
	}
}

func TestAlipayMalformed(t *testing.T) {
	totals := []string{aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元", "#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元"}
	with := func(body ...string) []byte { return aliBill(t, aliLines(append(body, totals...)...)...) }
	for _, c := range []struct {
		name     string
		bill     []byte
		kind     error
		line     int
		contains string
	}{
		{"a comma in 商品名称 breaks the row", with(strings.Replace(aliPay, "会员续费", "会员,续费", 1), aliRefund),
			bill.ErrMalformed, 6, "26 values where the header has 25 columns"},
		{"a bad 订单金额", with(strings.Replace(aliPay, ",9.90,9.90,", ",9.9O,9.90,", 1), aliRefund), bill.ErrMalformed, 6, "订单金额"},
		{"a bad 商家实收", with(strings.Replace(aliPay, ",9.90,9.90,", ",9.90,x,", 1), aliRefund), bill.ErrMalformed, 6, "商家实收"},
		{"a negative payment", with(strings.Replace(aliPay, ",9.90,9.90,", ",-9.90,9.90,", 1), aliRefund), bill.ErrMalformed, 6, "negative 订单金额"},
		{"a bad 完成时间", with(strings.Replace(aliPay, "2026-10-03 10:55:23", "2026-10-03", 1), aliRefund), bill.ErrMalformed, 6, "完成时间"},
		{"no 支付宝交易号", with(strings.Replace(aliPay, "2026100322001458860515315453\t", "\t", 1), aliRefund), bill.ErrMalformed, 6, "no 支付宝交易号"},
		{"cut before the end marker", aliBill(t, aliLines(aliPay, aliRefund)...), bill.ErrIncomplete, 0, "no 业务明细列表结束"},
		{"cut after the end marker", aliBill(t, aliLines(aliPay, aliRefund, aliEnd)...), bill.ErrIncomplete, 0, "no #交易合计"},
		{"refunds but no #退款合计", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元")...),
			bill.ErrIncomplete, 0, "1 退款 rows but no #退款合计"},
		{"#交易合计 counts another number", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：2笔，商家实收共9.90元，商家优惠共0.00元")...),
			bill.ErrIncomplete, 9, "counts 2 rows, the bill has 1 交易 rows"},
		{"#退款合计 sums another amount", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元",
			"#退款合计：1笔，商家实收退款共-4.01元，商家优惠退款共0.00元")...), bill.ErrIncomplete, 10, "商家实收退款共-4.01元, the 退款 rows' 商家实收 add up to -4.00"},
		{"a row after the end marker", aliBill(t, aliLines(aliPay, aliEnd, aliRefund)...), bill.ErrMalformed, 8, "after the 业务明细列表结束"},
		{"an empty download", nil, bill.ErrIncomplete, 0, "empty"},
		{"the 汇总 file instead", aliBill(t, "#支付宝业务汇总查询", "#账号：[20880211096256330156]"), bill.ErrMalformed, 1, "汇总"},
		{"a header without 业务类型", aliBill(t, alipayHead[0], alipayHead[3], strings.Replace(alipayHeader, "业务类型", "类型", 1)),
			bill.ErrMalformed, 3, "no 业务类型 column"},
		{"no header at all", aliBill(t, alipayHead[:4]...), bill.ErrIncomplete, 0, "no header line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := billcheck.ReadAll(billFormat, c.bill)
			billcheck.LineError(t, err, c.kind, c.line, c.contains)
		})
	}
	t.Run("a last row cut mid-line", func(t *testing.T) {
		data := aliBill(t, aliLines(aliPay)...)
		_, _, err := billcheck.ReadAll(billFormat, data[:len(data)-40])
		billcheck.LineError(t, err, bill.ErrIncomplete, 6, "truncated")
	})
}

// billCases are the generated bills the runners every layout passes read.
var billCases = []billcheck.Case{
	{Name: "alipay GBK CRLF", Format: billFormat, Gen: func() billcheck.Generator { return &alipayGen{} },
		Want: alipayWant, Layout: "alipay 业务明细", Checked: true},
	{Name: "alipay re-saved as UTF-8 LF", Format: billFormat, Gen: func() billcheck.Generator { return &alipayGen{utf8: true, nl: "\n"} },
		Want: alipayWant, Layout: "alipay 业务明细", Checked: true},
}

// TestBillGenerated reads a few hundred generated rows, payments and
// partial refunds, and compares each row with what was written.
func TestBillGenerated(t *testing.T) { billcheck.Generated(t, billCases) }

// TestBillTruncatedAnywhere cuts each bill at every byte: a cut bill fails
// or, when only a trailing comment was cut, still has every row.
func TestBillTruncatedAnywhere(t *testing.T) { billcheck.TruncatedAnywhere(t, billCases) }

func TestBillOpenErrors(t *testing.T) {
	wechat := billtest.Bytes(wechatpaybill.NewWriter, []billtest.Row{
		{Kind: billtest.Payment, Order: "4200000925202610030000000001", MerchantOrder: "M1", Merchant: "1900000109",
			Amount: "6.00", Currency: "CNY", Time: billcheck.Day},
		{Kind: billtest.Payment, Order: "4200000925202610030000000002", MerchantOrder: "M2", Merchant: "1900000109",
			Amount: "7.00", Currency: "CNY", Time: billcheck.Day},
	})
	billcheck.OpenErrors(t, billFormat, []billcheck.OpenError{
		{Name: "alipay zip archive", Data: []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), Kind: bill.ErrMalformed, Contains: "unzip it"},
		{Name: "the zip note names the file to pass", Data: []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00"), Kind: bill.ErrMalformed, Contains: "pass the …_业务明细.csv one"},
		{Name: "empty alipay", Kind: bill.ErrIncomplete, Contains: "empty"},
		{Name: "a WeChat bill read as Alipay's", Data: wechat, Kind: bill.ErrMalformed, Contains: "not an Alipay bill"},
	})
}

func FuzzAlipayBill(f *testing.F) {
	billcheck.Fuzz(f, billFormat, true, billcheck.Bytes(&alipayGen{}, 6), billcheck.Bytes(&alipayGen{utf8: true, nl: "\n"}, 6),
		[]byte(strings.Join(aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元",
			"#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元"), "\n")))
}

// BenchmarkBillMillionRows parses a generated bill of 1M rows (see
// billcheck.MillionRows for the figures it reports).
func BenchmarkBillMillionRows(b *testing.B) { billcheck.MillionRows(b, millionBill()) }

// BenchmarkBillGenerate measures the generator the tests use.
func BenchmarkBillGenerate(b *testing.B) { billcheck.Generate(b, millionBill()) }

func millionBill() []billcheck.Case {
	c := billCases[0]
	c.Name = "alipay"
	return []billcheck.Case{c}
}
