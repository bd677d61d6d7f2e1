package alipay

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
)

// Alipay's trade bill, the 业务明细 file of bill_type=trade
// (alipay.data.dataservice.bill.downloadurl.query, opendocs.alipay.com/open/204/106262
// "对账说明"; its download is a zip holding …_业务明细.csv and
// …_业务明细(汇总).csv). The text is GBK ("该表格的文字编码是ANSI编码 … 代表
// GBK 编码", developer.aliyun.com/article/707638).
//
// Layout, as every public sample agrees (a Java test's alipayBill() with
// 2019 data, a Go test's alipayDetailCSVSample, a Java GenBillFile):
//
//	#支付宝业务明细查询
//	#账号：[20880211096256330156]
//	#起始日期：[2019年09月16日 00:00:00]   终止日期：[2019年09月17日 00:00:00]
//	#-----------------------------------------业务明细列表----------------------------------------
//	支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,…,订单金额（元）,商家实收（元）,…,退款批次号/请求号,服务费（元）,分润（元）,备注
//	2019091622001458860515315453<TAB>,service_1568601259302<TAB>,交易<TAB>,下单测试,…,0.01,0.01,…
//	2019091622001458860515315453<TAB>,service_1568601259302<TAB>,退款<TAB>,下单测试,…,-0.01,-0.01,…,re_test_1568602607356<TAB>,…
//	#-----------------------------------------业务明细列表结束------------------------------------
//	#交易合计：6笔，商家实收共0.06元，商家优惠共0.00元
//	#退款合计：4笔，商家实收退款共-0.04元，商家优惠退款共0.00元
//	#导出时间：[2019年09月17日 05:46:49]
//
// Identifiers carry a trailing TAB (against Excel); a refund row repeats
// the trade's ids with negative amounts and names the refund's
// out_request_no, which the refund's notification carries as out_biz_no.
// Nothing is quoted, so a product name with a comma breaks its row: the
// column count says so. Older bills word the totals "交易金额共…元，优惠金额共…元".

var (
	// The two 业务类型 values, as GBK bytes: rows are classified without
	// decoding them.
	gbkPayment = []byte("\xbd\xbb\xd2\xd7") // 交易
	gbkRefund  = []byte("\xcd\xcb\xbf\xee") // 退款
	utfPayment = []byte("交易")
	utfRefund  = []byte("退款")
)

type tradeBill struct {
	bill.Base
	f             [][]byte // the fields of the line read, reused
	gbk           bool     // false for a bill someone re-saved as UTF-8
	width         int
	iTrade, iOut  int
	iType, iTotal int
	iNet, iOff    int // 商家实收, 商家优惠
	iDone, iMade  int // 完成时间, 创建时间
	iRefund, iCur int
	// sums[kind][column]: counts and sums of the rows read, per 业务类型,
	// for the #交易合计 and #退款合计 lines.
	count [2]int
	sums  [2]map[string]int64
	ended bool // the 业务明细列表结束 marker was read
	// The #交易合计 and #退款合计 lines were read and agreed.
	payTotal, refundTotal bool
}

// Bill is what reconciliation with Alipay's bill allows for: Beijing
// days, a bill that names the seller account rather than the app, and
// refund notifications that carry the refunded total.
var Bill = &bill.Traits{Format: billFormat, Zone: keying.Beijing, NamesSeller: true, RefundIsTotal: true,
	Account: billAccount, SellerMerchant: sellerMerchant}

// billFormat is the 业务明细 (detail) CSV of Alipay's trade bill. The
// download is a zip of two files: a zip archive is refused saying which to
// pass.
var billFormat = bill.NewFormat("alipay", openAlipay).WithZipNote("Alipay's download (….csv.zip) holds two files; " +
	"pass the …_业务明细.csv one (not …_业务明细(汇总).csv): unzip it")

func openAlipay(b *bill.Base) (bill.Parser, error) {
	a := &tradeBill{Base: *b}
	a.sums = [2]map[string]int64{{}, {}}
	a.Sum.Layout = "alipay 业务明细"
	first, err := a.Line()
	if err == io.EOF {
		return nil, a.Whole(bill.ErrIncomplete, "the bill is empty")
	}
	if err != nil {
		return nil, a.Read(err)
	}
	a.gbk = !utf8.Valid(first)
	title := a.text(first)
	switch {
	case !strings.HasPrefix(title, "#") || !strings.Contains(title, "支付宝"):
		return nil, a.BadAt(1, "not an Alipay bill: the first line is %s, not #支付宝业务明细查询", bill.Clip([]byte(title)))
	case strings.Contains(title, "汇总"):
		return nil, a.BadAt(1, "this is the 业务明细(汇总) summary file; pass the …_业务明细.csv file of the download")
	}
	for {
		line, err := a.Line()
		if err == io.EOF {
			return nil, a.Whole(bill.ErrIncomplete, "no header line (支付宝交易号,…): the bill is truncated")
		}
		if err != nil {
			return nil, a.Read(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if line[0] == '#' {
			a.comment(a.text(line))
			continue
		}
		return a, a.header(line)
	}
}

// text decodes a value, which is GBK unless the whole bill turned out to
// be UTF-8; ASCII needs no decoding.
func (a *tradeBill) text(b []byte) string {
	if a.gbk && !ascii(b) {
		if s, err := simplifiedchinese.GB18030.NewDecoder().Bytes(b); err == nil {
			return string(s)
		}
	}
	return string(b)
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

var (
	alipayAccount = regexp.MustCompile(`#账号[：:]\[(\w+)\]`)
	alipayPeriod  = regexp.MustCompile(`起始日期[：:]\[([^\]]+)\].*终止日期[：:]\[([^\]]+)\]`)
)

// comment reads what the head's comment lines offer: account and period.
func (a *tradeBill) comment(s string) {
	if m := alipayAccount.FindStringSubmatch(s); m != nil {
		a.Sum.Account = m[1]
	}
	if m := alipayPeriod.FindStringSubmatch(s); m != nil {
		from, err1 := time.ParseInLocation("2006年01月02日 15:04:05", m[1], keying.Beijing)
		to, err2 := time.ParseInLocation("2006年01月02日 15:04:05", m[2], keying.Beijing)
		if err1 == nil && err2 == nil {
			a.Sum.From, a.Sum.To = from, to
		}
	}
}

// alipayName drops the unit from a column name: "订单金额（元）" and
// "订单金额(元)" are both "订单金额".
func alipayName(s string) string {
	s = strings.TrimSpace(strings.Trim(s, "\t"))
	s = strings.TrimSuffix(s, "（元）")
	return strings.TrimSuffix(s, "(元)")
}

func (a *tradeBill) header(line []byte) error {
	a.f = bill.SplitPlain(a.f, line)
	cols := bill.Columns{}
	for i, n := range a.f {
		cols[alipayName(a.text(n))] = i
	}
	a.width = len(a.f)
	if miss := cols.Missing([]string{"支付宝交易号"}, []string{"业务类型"}, []string{"订单金额"}); len(miss) > 0 {
		return a.Bad("not an Alipay 业务明细 header: no %s column (header %s)", strings.Join(miss, ", "), bill.Clip([]byte(a.text(line))))
	}
	a.iTrade, a.iType, a.iTotal = cols["支付宝交易号"], cols["业务类型"], cols["订单金额"]
	a.iOut = cols.Index("商户订单号")
	a.iNet = cols.Index("商家实收")
	a.iOff = cols.Index("商家优惠")
	a.iDone = cols.Index("完成时间")
	a.iMade = cols.Index("创建时间")
	a.iRefund = cols.Index("退款批次号/请求号")
	a.iCur = cols.Index("币种")
	return nil
}

func (a *tradeBill) Next() (bill.Row, error) {
	for {
		line, err := a.Line()
		if err == io.EOF {
			return bill.Row{}, a.end()
		}
		if err != nil {
			return bill.Row{}, a.Read(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if line[0] == '#' {
			if err := a.trailer(a.text(line)); err != nil {
				return bill.Row{}, err
			}
			continue
		}
		if a.ended {
			return bill.Row{}, a.Bad("a detail row after the 业务明细列表结束 marker")
		}
		return a.row(line)
	}
}

func (a *tradeBill) row(line []byte) (bill.Row, error) {
	f := bill.SplitPlain(a.f, line)
	a.f = f
	if len(f) != a.width {
		return bill.Row{}, a.Bad("%d values where the header has %d columns (a comma inside 商品名称 or 备注?)", len(f), a.width)
	}
	for i := range f {
		f[i] = bill.Trim(f[i])
	}
	row := bill.Row{Line: a.LineNo(), Order: a.text(f[a.iTrade]), MerchantOrder: a.text(bill.At(f, a.iOut)), Currency: "CNY"}
	if c := bill.At(f, a.iCur); len(c) > 0 {
		row.Currency = strings.ToUpper(a.text(c)) // rare: the trade bill has no 币种 column
		if !bill.IsCurrency(row.Currency) {
			return bill.Row{}, a.Bad("币种 %s is not an ISO 4217 code", bill.Clip(c))
		}
	}
	typ := f[a.iType]
	k := -1
	switch {
	case bytes.Equal(typ, gbkPayment) || bytes.Equal(typ, utfPayment):
		row.Kind, row.Type, k = bill.Payment, "交易", 0
	case bytes.Equal(typ, gbkRefund) || bytes.Equal(typ, utfRefund):
		row.Kind, row.Type, k = bill.Refund, "退款", 1
		row.Refund = a.text(bill.At(f, a.iRefund))
	default:
		row.Type = a.text(typ)
	}
	if row.Order == "" {
		return bill.Row{}, a.Bad("no 支付宝交易号")
	}
	total, err := bill.ParseFixed(f[a.iTotal], 2)
	if err != nil {
		return bill.Row{}, a.Bad("订单金额 %s is not an amount", bill.Clip(f[a.iTotal]))
	}
	if row.Kind == bill.Payment && total < 0 {
		return bill.Row{}, a.Bad("a 交易 row with a negative 订单金额 %s", bill.Clip(f[a.iTotal]))
	}
	// A refund is negative in the bill; its notification's amount is not.
	if row.Amount, row.Minor, err = bill.AmountOf(total, 2, row.Currency); err != nil {
		return bill.Row{}, a.Bad("订单金额 %s does not fit %s", bill.Clip(f[a.iTotal]), row.Currency)
	}
	var net, off int64
	if a.iNet >= 0 {
		if net, err = bill.ParseFixed(f[a.iNet], 2); err != nil {
			return bill.Row{}, a.Bad("商家实收 %s is not an amount", bill.Clip(f[a.iNet]))
		}
		row.Settled, _, _ = bill.AmountOf(net, 2, "CNY")
	}
	if a.iOff >= 0 && len(f[a.iOff]) > 0 {
		if off, err = bill.ParseFixed(f[a.iOff], 2); err != nil {
			return bill.Row{}, a.Bad("商家优惠 %s is not an amount", bill.Clip(f[a.iOff]))
		}
	}
	when := bill.At(f, a.iDone)
	if len(when) == 0 {
		when = bill.At(f, a.iMade)
	}
	if row.Time, err = bill.ParseClock(when, keying.Beijing); err != nil {
		return bill.Row{}, a.Bad("完成时间 %s is not a time (yyyy-MM-dd HH:mm:ss)", bill.Clip(when))
	}
	if k >= 0 {
		a.count[k]++
		a.sums[k]["订单金额"] += total
		a.sums[k]["商家实收"] += net
		a.sums[k]["商家优惠"] += off
	}
	return row, nil
}

var (
	alipayTotal = regexp.MustCompile(`^#(交易|退款)合计[：:]\s*(\d+)笔(.*)$`)
	alipaySum   = regexp.MustCompile(`([^，,]+?)共(-?[0-9.]+)元`)
	// What each wording of the totals adds up.
	alipaySums = map[string]string{
		"商家实收": "商家实收", "商家实收退款": "商家实收",
		"交易金额": "订单金额", "交易退款金额": "订单金额",
		"商家优惠": "商家优惠", "商家优惠退款": "商家优惠",
	}
)

// trailer reads a comment line after the rows: the end marker and the
// totals, which are checked as they come.
func (a *tradeBill) trailer(s string) error {
	if strings.Contains(s, "业务明细列表结束") {
		a.ended = true
		return nil
	}
	m := alipayTotal.FindStringSubmatch(s)
	if m == nil {
		return nil // #导出时间 and anything else the platform adds
	}
	if !a.ended {
		return a.Bad("%s before the 业务明细列表结束 marker", m[1]+"合计")
	}
	k := 0
	if m[1] == "退款" {
		k = 1
	}
	n, _ := bill.Digits([]byte(m[2]))
	if n != a.count[k] {
		return a.Disagree(a.LineNo(), "#%s合计 counts %d rows, the bill has %d %s rows: it is incomplete or altered", m[1], n, a.count[k], m[1])
	}
	for _, p := range alipaySum.FindAllStringSubmatch(m[3], -1) {
		col, ok := alipaySums[strings.TrimSpace(p[1])]
		if !ok || (col == "商家实收" && a.iNet < 0) || (col == "商家优惠" && a.iOff < 0) {
			continue
		}
		want, err := bill.ParseFixed([]byte(p[2]), 2)
		if err != nil {
			return a.Bad("%s共%s元: not an amount", p[1], p[2])
		}
		if got := a.sums[k][col]; got != want {
			return a.Disagree(a.LineNo(), "#%s合计 says %s共%s元, the %s rows' %s add up to %s", m[1], p[1], bill.FormatFixed(want, 2),
				m[1], col, bill.FormatFixed(got, 2))
		}
	}
	if k == 0 {
		a.payTotal = true
	} else {
		a.refundTotal = true
	}
	return nil
}

// end is io.EOF for a whole bill.
func (a *tradeBill) end() error {
	switch {
	case !a.ended:
		return a.Whole(bill.ErrIncomplete, "no 业务明细列表结束 marker after %d rows: the download is truncated", a.Sum.Rows)
	case !a.payTotal:
		return a.Whole(bill.ErrIncomplete, "no #交易合计 line after the rows: the download is truncated")
	case a.count[1] > 0 && !a.refundTotal:
		return a.Whole(bill.ErrIncomplete, "%d 退款 rows but no #退款合计 line: the download is truncated", a.count[1])
	}
	a.Sum.Checked = true
	return io.EOF
}
