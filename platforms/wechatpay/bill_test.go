package wechatpay

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
)

// Bills written by hand to the layouts of WeChat Pay's format page and the
// SDKs' samples (see bill.go); the values are ours.
const (
	wxPay = "`2026-10-03 08:35:41,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000001,`M1,`oUpF8u,`JSAPI,`SUCCESS,`PSBC_DEBIT,`CNY,`6.00,`0.00,`0,`0,`0.00,`0.00,`,`,`会员续费,`,`0.04000,`0.60%,`6.00,`0.00,`"
	// A partial refund of it: REFUND, the original ids, 应结订单金额 0.00,
	// 退款金额 and 申请退款金额 positive.
	wxRefund  = "`2026-10-03 20:53:36,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000001,`M1,`oUpF8u,`JSAPI,`REFUND,`PSBC_DEBIT,`CNY,`0.00,`0.00,`50303108562026100301487282563,`R1,`2.50,`0.00,`ORIGINAL,`PROCESSING,`会员续费,`,`-0.01500,`0.60%,`0.00,`2.50,`"
	wxRevoked = "`2026-10-03 09:00:00,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000002,`M2,`oUpF8u,`MICROPAY,`REVOKED,`CFT,`CNY,`1.00,`0.00,`0,`0,`0.00,`0.00,`,`,`咖啡,`,`0.00600,`0.60%,`1.00,`0.00,`"
	wxSumHead = "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"
)

func wxBill(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

func TestWeChatDocumentedLayouts(t *testing.T) {
	paid := bill.Row{Line: 2, Kind: bill.Payment, Order: "4200000925202610030000000001", Merchant: "1900000109", MerchantOrder: "M1", Amount: "6.00",
		Minor: 600, Settled: "6.00", Currency: "CNY", Time: time.Date(2026, 10, 3, 8, 35, 41, 0, keying.Beijing),
		Type: "SUCCESS", Status: "SUCCESS"}
	refund := bill.Row{Line: 3, Kind: bill.Refund, Order: "4200000925202610030000000001", Merchant: "1900000109", MerchantOrder: "M1", Refund: "R1",
		ID: "50303108562026100301487282563", Amount: "2.50", Minor: 250, Settled: "2.50", Currency: "CNY",
		Time: time.Date(2026, 10, 3, 20, 53, 36, 0, keying.Beijing), Type: "REFUND", Status: "PROCESSING"}
	refundAt2 := refund
	refundAt2.Line = 2
	for _, c := range []struct {
		name   string
		bill   []byte
		layout string
		want   []bill.Row
	}{
		{"ALL: a payment, its partial refund, a revoked payment", wxBill(wechatALL, wxPay, wxRefund, wxRevoked, wxSumHead,
			"`3,`7.00,`2.50,`0.00,`0.03100,`7.00,`2.50"), "wechatpay ALL",
			[]bill.Row{paid, refund, {Line: 4, Kind: bill.Other, Order: "4200000925202610030000000002", Merchant: "1900000109", MerchantOrder: "M2",
				Amount: "1.00", Minor: 100, Settled: "1.00", Currency: "CNY", Time: time.Date(2026, 10, 3, 9, 0, 0, 0, keying.Beijing),
				Type: "REVOKED", Status: "REVOKED"}}},
		{"ALL as captured: BOM, CRLF, no line end after the summary",
			[]byte("\ufeff" + strings.Join([]string{wechatALL, wxPay, wxSumHead, "`1,`6.00,`0.00,`0.00,`0.04000,`6.00,`0.00"}, "\r\n")),
			"wechatpay ALL", []bill.Row{paid}},
		{"SUCCESS with the documented 4-column summary", wxBill(wechatSUCCESS,
			"`2026-10-03 08:35:41,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000001,`M1,`oUpF8u,`JSAPI,`SUCCESS,`PSBC_DEBIT,`CNY,`6.00,`0.00,`会员续费,`,`0.04000,`0.60%,`6.00,`",
			"总交易单数,应结订单总金额,手续费总金额,订单总金额", "`1,`6.00,`0.04000,`6.00"), "wechatpay SUCCESS", []bill.Row{paid}},
		{"SUCCESS with the 7-column summary of WxJava's sample", wxBill(wechatSUCCESS,
			"`2026-10-03 08:35:41,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000001,`M1,`oUpF8u,`JSAPI,`SUCCESS,`PSBC_DEBIT,`CNY,`6.00,`0.00,`会员续费,`,`0.04000,`0.60%,`6.00,`",
			wxSumHead, "`1,`6.00,`0.00,`0.00,`0.04000,`6.00,`0.00"), "wechatpay SUCCESS", []bill.Row{paid}},
		{"REFUND with 退款申请时间 and 退款成功时间", wxBill(wechatREFUND,
			"`2026-10-03 20:53:36,`wx2421b1c4370ec43b,`1900000109,`0,`,`4200000925202610030000000001,`M1,`oUpF8u,`JSAPI,`REFUND,`PSBC_DEBIT,`CNY,`0.00,`0.00,`2026-10-03 20:53:36,`2026-10-03 20:53:40,`50303108562026100301487282563,`R1,`2.50,`0.00,`ORIGINAL,`PROCESSING,`会员续费,`,`-0.01500,`0.60%,`0.00,`2.50,`",
			wxSumHead, "`1,`0.00,`2.50,`0.00,`-0.01500,`0.00,`2.50"), "wechatpay REFUND", []bill.Row{refundAt2}},
		{"early 24-column format: 总金额, full-width colons, amounts 0.0", wxBill(wechatEarly,
			"`2014-11-10 16：33：45,`wx2421b1c4370ec43b,`10000100,`0,`1000,`1001690740201411100005734289,`1415640626,`085e9858e3ba5186aafcbaed1,`MICROPAY,`SUCCESS,`OTHERS,`CNY,`0.01,`0.0,`0,`0,`0,`0,`,`,`被扫支付测试,`订单额外描述,`0,`0.60%",
			"总交易单数,总交易额,总退款金额,总代金券或立减优惠退款金额,手续费总金额", "`1,`0.01,`0.0,`0.0,`0"),
			"wechatpay ALL (early 24-column format)",
			[]bill.Row{{Line: 2, Kind: bill.Payment, Order: "1001690740201411100005734289", Merchant: "10000100", MerchantOrder: "1415640626", Amount: "0.01",
				Minor: 1, Settled: "0.01", Currency: "CNY", Time: time.Date(2014, 11, 10, 16, 33, 45, 0, keying.Beijing),
				Type: "SUCCESS", Status: "SUCCESS"}}},
		{"a service provider's bill: the order is the sub-merchant's (特约商户号)", wxBill(wechatALL,
			strings.Replace(wxPay, "`1900000109,`0,", "`1900000109,`1900000888,", 1), wxSumHead, "`1,`6.00,`0.00,`0.00,`0.04000,`6.00,`0.00"),
			"wechatpay ALL", []bill.Row{func() bill.Row { r := paid; r.Merchant, r.Provider = "1900000888", "1900000109"; return r }()}},
		{"no transactions: header and a zero summary", wxBill(wechatALL, wxSumHead, "`0,`0.00,`0.00,`0.00,`0.00000,`0.00,`0.00"),
			"wechatpay ALL", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sum := billcheck.Rows(t, billFormat, c.bill, c.want)
			if sum.Layout != c.layout || !sum.Checked {
				t.Errorf("layout %q checked %v, want %q checked", sum.Layout, sum.Checked, c.layout)
			}
		})
	}
}

func TestWeChatMalformed(t *testing.T) {
	sum1 := "`1,`6.00,`0.00,`0.00,`0.04000,`6.00,`0.00"
	for _, c := range []struct {
		name     string
		bill     []byte
		kind     error
		line     int
		contains string
	}{
		{"a comma inside 商品名称", wxBill(wechatALL, strings.Replace(wxPay, "会员续费", "会员,续费", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "28 values where the header has 27"},
		{"a value without its backquote", wxBill(wechatALL, strings.Replace(wxPay, "`JSAPI", "JSAPI", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "leading backquote"},
		{"an amount that is not one", wxBill(wechatALL, strings.Replace(wxPay, "`6.00,`0.00,`0,", "`6.0O,`0.00,`0,", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "应结订单金额"},
		{"a negative order amount", wxBill(wechatALL, strings.Replace(wxPay, "`6.00,`0.00,`", "`-6.00,`0.00,`", 2), wxSumHead, "`1,`-6.00,`0.00,`0.00,`0.04000,`-6.00,`0.00"),
			bill.ErrMalformed, 2, "not a positive CNY amount"},
		{"a currency that is not a code", wxBill(wechatALL, strings.Replace(wxPay, "`CNY", "`0", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "货币种类"},
		{"a bad time", wxBill(wechatALL, strings.Replace(wxPay, "08:35:41", "08:75:41", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "交易时间"},
		{"a REFUND row without 商户退款单号", wxBill(wechatALL, strings.Replace(wxRefund, "`R1,", "`0,", 1), wxSumHead, sum1),
			bill.ErrMalformed, 2, "商户退款单号"},
		{"no summary: the download stopped after the rows", wxBill(wechatALL, wxPay, wxRefund), bill.ErrIncomplete, 0, "no summary"},
		{"a summary header and no summary row", wxBill(wechatALL, wxPay, wxSumHead), bill.ErrIncomplete, 0, "no summary row"},
		{"a last row cut mid-line", []byte(wechatALL + "\n" + wxPay[:120]), bill.ErrIncomplete, 2, "truncated"},
		{"the summary counts more rows", wxBill(wechatALL, wxPay, wxSumHead, "`2,`6.00,`0.00,`0.00,`0.04000,`6.00,`0.00"),
			bill.ErrIncomplete, 4, "counts 2 rows (总交易单数), the bill has 1"},
		{"the summary's settled total disagrees", wxBill(wechatALL, wxPay, wxSumHead, "`1,`6.01,`0.00,`0.00,`0.04000,`6.00,`0.00"),
			bill.ErrIncomplete, 4, "应结订单总金额 says 6.01, the rows' 应结订单金额 add up to 6.00"},
		{"the summary's refund total disagrees", wxBill(wechatALL, wxPay, wxRefund, wxSumHead, "`2,`6.00,`2.00,`0.00,`0.02500,`6.00,`2.50"),
			bill.ErrIncomplete, 5, "退款总金额 says 2.00"},
		{"a summary row of the wrong width", wxBill(wechatALL, wxPay, wxSumHead, "`1,`6.00"), bill.ErrMalformed, 4, "2 values, its header 7"},
		{"text after the summary", wxBill(wechatALL, wxPay, wxSumHead, sum1, "`extra"), bill.ErrMalformed, 5, "after the summary"},
		{"the v2 API's error answer", []byte("<xml><return_code><![CDATA[FAIL]]></return_code><return_msg><![CDATA[No Bill Exist]]></return_msg><error_code><![CDATA[20002]]></error_code></xml>"),
			bill.ErrMalformed, 1, "No Bill Exist"},
		{"a v3 JSON error", []byte(`{"code":"NO_STATEMENT_EXIST","message":"账单文件不存在"}`), bill.ErrMalformed, 1, "JSON"},
		{"a header without 微信订单号", wxBill(strings.Replace(wechatALL, "微信订单号", "订单号", 1), wxPay), bill.ErrMalformed, 1, "no 微信订单号 column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := billcheck.ReadAll(billFormat, c.bill)
			billcheck.LineError(t, err, c.kind, c.line, c.contains)
		})
	}
}

// billCases are the generated bills the runners every layout passes read.
var billCases = []billcheck.Case{
	{Name: "wechatpay ALL", Format: billFormat, Gen: func() billcheck.Generator { return &wechatGen{kind: "ALL"} },
		Want: (&wechatGen{kind: "ALL"}).want, Layout: "wechatpay ALL", Checked: true},
	{Name: "wechatpay_v2 ALL with BOM and CRLF", Format: billFormat,
		Gen:  func() billcheck.Generator { return &wechatGen{kind: "ALL", bom: true, crlf: true} },
		Want: (&wechatGen{kind: "ALL"}).want, Layout: "wechatpay ALL", Checked: true},
	{Name: "wechatpay SUCCESS", Format: billFormat, Gen: func() billcheck.Generator { return &wechatGen{kind: "SUCCESS"} },
		Want: (&wechatGen{kind: "SUCCESS"}).want, Layout: "wechatpay SUCCESS", NoRefunds: true, Checked: true},
	{Name: "wechatpay REFUND", Format: billFormat, Gen: func() billcheck.Generator { return &wechatGen{kind: "REFUND"} },
		Want: (&wechatGen{kind: "REFUND"}).want, Layout: "wechatpay REFUND", Checked: true},
	{Name: "wechatpay early 24 columns", Format: billFormat, Gen: func() billcheck.Generator { return &wechatGen{kind: "ALL", early: true} },
		Want: (&wechatGen{kind: "ALL", early: true}).want, Layout: "wechatpay ALL (early 24-column format)", Checked: true},
}

// TestBillGenerated reads a few hundred generated rows of every bill_type,
// payments and partial refunds, and compares each row with what was
// written.
func TestBillGenerated(t *testing.T) { billcheck.Generated(t, billCases) }

// TestBillTruncatedAnywhere cuts each bill at every byte: every cut fails.
func TestBillTruncatedAnywhere(t *testing.T) { billcheck.TruncatedAnywhere(t, billCases) }

// TestBillEncodings: a gzip download (tar_type=GZIP) holding a BOM is
// unpacked before the layout reads it.
func TestBillEncodings(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(billcheck.Bytes(&wechatGen{kind: "ALL", bom: true, crlf: true}, 20))
	_ = zw.Close()
	rows, sum, err := billcheck.ReadAll(billFormat, gz.Bytes())
	if err != nil || len(rows) != 20 || !sum.Checked {
		t.Fatalf("%d rows, checked %v, error %v", len(rows), sum.Checked, err)
	}
}

func TestBillOpenErrors(t *testing.T) {
	alipay := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20880211096256330156", billcheck.Day, billcheck.Day.AddDate(0, 0, 1))
	}, []billtest.Row{
		{Kind: billtest.Payment, Order: "2026100322001458860000000001", MerchantOrder: "M1", Amount: "9.90", Currency: "CNY", Time: billcheck.Day},
		{Kind: billtest.Payment, Order: "2026100322001458860000000002", MerchantOrder: "M2", Amount: "6.00", Currency: "CNY", Time: billcheck.Day},
	})
	billcheck.OpenErrors(t, billFormat, []billcheck.OpenError{
		{Name: "broken gzip", Data: []byte{0x1f, 0x8b, 0x08, 0x00, 0x01}, Kind: bill.ErrMalformed, Contains: "gzip"},
		{Name: "empty wechatpay", Kind: bill.ErrIncomplete, Contains: "empty"},
		{Name: "an Alipay bill read as WeChat's", Data: alipay, Kind: bill.ErrMalformed, Contains: "not a WeChat Pay trade bill"},
	})
}

// TestBillErrorIsFinal: after an error Next keeps returning it.
func TestBillErrorIsFinal(t *testing.T) {
	data := billcheck.Bytes(&wechatGen{kind: "ALL"}, 3)
	data = bytes.Replace(data, []byte("`CNY,`"), []byte("`CNY,,`"), 1)
	r, err := billFormat.Open(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	_, first := r.Next()
	_, again := r.Next()
	if first == nil || first != again {
		t.Fatalf("first %v, again %v: want the same error twice", first, again)
	}
}

func FuzzWeChatPayBill(f *testing.F) {
	billcheck.Fuzz(f, billFormat, true, billcheck.Bytes(&wechatGen{kind: "ALL", bom: true, crlf: true}, 6),
		billcheck.Bytes(&wechatGen{kind: "REFUND"}, 3), billcheck.Bytes(&wechatGen{kind: "SUCCESS"}, 3),
		billcheck.Bytes(&wechatGen{kind: "ALL", early: true}, 6),
		wxBill(wechatALL, wxPay, wxRefund, wxRevoked, wxSumHead, "`3,`7.00,`2.50,`0.00,`0.03100,`7.00,`2.50"))
}

// BenchmarkBillMillionRows parses a generated bill of 1M rows (see
// billcheck.MillionRows for the figures it reports).
func BenchmarkBillMillionRows(b *testing.B) { billcheck.MillionRows(b, millionBill()) }

// BenchmarkBillGenerate measures the generator the tests use.
func BenchmarkBillGenerate(b *testing.B) { billcheck.Generate(b, millionBill()) }

func millionBill() []billcheck.Case {
	c := billCases[0]
	c.Name = "wechatpay"
	return []billcheck.Case{c}
}
