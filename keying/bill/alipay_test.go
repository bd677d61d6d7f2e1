package bill

import (
	"archive/zip"
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// An Alipay 业务明细 bill written by hand to the documented layout (see
// alipay.go); the values are ours.
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
	bill := aliBill(t, aliLines(aliPay, aliRefund, aliEnd,
		"#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元", "#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元")...)
	for _, b := range [][]byte{{0xbd, 0xbb, 0xd2, 0xd7}, {0xcd, 0xcb, 0xbf, 0xee}} {
		if !bytes.Contains(bill, b) {
			t.Fatalf("the GBK bill lacks % x", b)
		}
	}
	rows, _, err := readAll("alipay", bill)
	if err != nil || len(rows) != 2 || rows[0].Kind != Payment || rows[1].Kind != Refund || rows[1].Type != "退款" {
		t.Fatalf("rows %+v, error %v", rows, err)
	}
}

func TestAlipayDocumentedLayout(t *testing.T) {
	paid := Row{Line: 6, Kind: Payment, Order: "2026100322001458860515315453", MerchantOrder: "M1", Amount: "9.90",
		Minor: 990, Settled: "9.90", Currency: "CNY", Time: time.Date(2026, 10, 3, 10, 55, 23, 0, beijing), Type: "交易"}
	refund := Row{Line: 7, Kind: Refund, Order: "2026100322001458860515315453", MerchantOrder: "M1",
		Refund: "re_20261003112655", Amount: "4.00", Minor: 400, Settled: "4.00", Currency: "CNY",
		Time: time.Date(2026, 10, 3, 11, 26, 55, 0, beijing), Type: "退款"}
	totals := []string{aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元", "#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元", aliExport}
	for _, c := range []struct {
		name string
		bill []byte
		want []Row
	}{
		{"GBK, CRLF: a payment and its partial refund", aliBill(t, aliLines(append([]string{aliPay, aliRefund}, totals...)...)...), []Row{paid, refund}},
		{"re-saved as UTF-8 with LF", []byte(strings.Join(aliLines(append([]string{aliPay, aliRefund}, totals...)...), "\n") + "\n"), []Row{paid, refund}},
		{"the older wording of the totals", aliBill(t, aliLines(aliPay, aliRefund, aliEnd,
			"#交易合计：1笔，交易金额共9.90元，优惠金额共0.00元", "#退款合计：1笔，交易退款金额共-4.00元，优惠退款金额共0.00元")...), []Row{paid, refund}},
		{"no refunds, so no #退款合计 needed", aliBill(t, aliLines(aliPay, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元")...), []Row{paid}},
		{"an empty day", aliBill(t, aliLines(aliEnd, "#交易合计：0笔，商家实收共0.00元，商家优惠共0.00元", "#退款合计：0笔，商家实收退款共0.00元，商家优惠退款共0.00元")...), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, sum, err := readAll("alipay", c.bill)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(c.want) {
				t.Fatalf("%d rows, want %d", len(rows), len(c.want))
			}
			for i := range rows {
				if rows[i] != c.want[i] {
					t.Errorf("row %d:\n got %+v\nwant %+v", i, rows[i], c.want[i])
				}
			}
			from := time.Date(2026, 10, 3, 0, 0, 0, 0, beijing)
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
			ErrMalformed, 6, "26 values where the header has 25 columns"},
		{"a bad 订单金额", with(strings.Replace(aliPay, ",9.90,9.90,", ",9.9O,9.90,", 1), aliRefund), ErrMalformed, 6, "订单金额"},
		{"a bad 商家实收", with(strings.Replace(aliPay, ",9.90,9.90,", ",9.90,x,", 1), aliRefund), ErrMalformed, 6, "商家实收"},
		{"a negative payment", with(strings.Replace(aliPay, ",9.90,9.90,", ",-9.90,9.90,", 1), aliRefund), ErrMalformed, 6, "negative 订单金额"},
		{"a bad 完成时间", with(strings.Replace(aliPay, "2026-10-03 10:55:23", "2026-10-03", 1), aliRefund), ErrMalformed, 6, "完成时间"},
		{"no 支付宝交易号", with(strings.Replace(aliPay, "2026100322001458860515315453\t", "\t", 1), aliRefund), ErrMalformed, 6, "no 支付宝交易号"},
		{"cut before the end marker", aliBill(t, aliLines(aliPay, aliRefund)...), ErrIncomplete, 0, "no 业务明细列表结束"},
		{"cut after the end marker", aliBill(t, aliLines(aliPay, aliRefund, aliEnd)...), ErrIncomplete, 0, "no #交易合计"},
		{"refunds but no #退款合计", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元")...),
			ErrIncomplete, 0, "1 退款 rows but no #退款合计"},
		{"#交易合计 counts another number", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：2笔，商家实收共9.90元，商家优惠共0.00元")...),
			ErrIncomplete, 9, "counts 2 rows, the bill has 1 交易 rows"},
		{"#退款合计 sums another amount", aliBill(t, aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元",
			"#退款合计：1笔，商家实收退款共-4.01元，商家优惠退款共0.00元")...), ErrIncomplete, 10, "商家实收退款共-4.01元, the 退款 rows' 商家实收 add up to -4.00"},
		{"a row after the end marker", aliBill(t, aliLines(aliPay, aliEnd, aliRefund)...), ErrMalformed, 8, "after the 业务明细列表结束"},
		{"an empty download", nil, ErrIncomplete, 0, "empty"},
		{"the 汇总 file instead", aliBill(t, "#支付宝业务汇总查询", "#账号：[20880211096256330156]"), ErrMalformed, 1, "汇总"},
		{"a header without 业务类型", aliBill(t, alipayHead[0], alipayHead[3], strings.Replace(alipayHeader, "业务类型", "类型", 1)),
			ErrMalformed, 3, "no 业务类型 column"},
		{"no header at all", aliBill(t, alipayHead[:4]...), ErrIncomplete, 0, "no header line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := readAll("alipay", c.bill)
			lineError(t, err, c.kind, c.line, c.contains)
		})
	}
	t.Run("a last row cut mid-line", func(t *testing.T) {
		bill := aliBill(t, aliLines(aliPay)...)
		_, _, err := readAll("alipay", bill[:len(bill)-40])
		lineError(t, err, ErrIncomplete, 6, "truncated")
	})
}

// TestAlipayDetail opens the 业务明细 file of a download built as Alipay's
// is: two files, GBK names without the UTF-8 flag.
func TestAlipayDetail(t *testing.T) {
	bill := aliBill(t, aliLines(aliPay, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元")...)
	archive := func(names ...string) *zip.Reader {
		var buf bytes.Buffer
		w := zip.NewWriter(&buf)
		for _, n := range names {
			gbk, err := simplifiedchinese.GBK.NewEncoder().String(n)
			if err != nil {
				t.Fatal(err)
			}
			fw, err := w.CreateHeader(&zip.FileHeader{Name: gbk, Method: zip.Deflate, NonUTF8: true})
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(n, "汇总).csv") {
				_, _ = fw.Write([]byte("#支付宝业务汇总查询\r\n"))
			} else {
				_, _ = fw.Write(bill)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		return zr
	}
	t.Run("the detail file after the summary file", func(t *testing.T) {
		rc, err := AlipayDetail(archive("20880211096256330156_20261003_业务明细(汇总).csv", "20880211096256330156_20261003_业务明细.csv"))
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		r, err := openBill("alipay", rc)
		if err != nil {
			t.Fatal(err)
		}
		row, err := r.Next()
		if err != nil || row.Order != "2026100322001458860515315453" {
			t.Fatalf("row %+v, error %v", row, err)
		}
	})
	t.Run("no detail file", func(t *testing.T) {
		_, err := AlipayDetail(archive("20880211096256330156_20261003_业务明细(汇总).csv"))
		lineError(t, err, ErrMalformed, 0, "业务明细(汇总).csv")
	})
}
