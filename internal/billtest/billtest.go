// Package billtest writes payment platforms' bills for tests, each in its
// platform's documented layout (the sources are cited in each platform's
// parser, platforms/<name>/bill.go): Alipay's 业务明细 (GBK, '#' head and
// totals, TAB after identifiers), WeChat Pay's ALL trade bill (backquoted
// values, summary), Stripe's itemized balance report and Dashboard balance
// export, PayPal's settlement report (record types, counts). A Writer
// streams: Row writes one detail line, Close the bill's end (totals the
// rows add up to), so a benchmark can stream a million rows in constant
// memory.
//
// It is test support: tests import it, and examples/bills writes sample
// bills with it (Samples).
package billtest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// Kind is what a row records.
type Kind int

const (
	Payment Kind = iota
	Refund
	// Payout is a row that is neither (a Stripe payout, a PayPal
	// withdrawal, WeChat Pay's REVOKED): reconciliation skips it.
	Payout
)

// Row is one detail line.
type Row struct {
	Kind Kind
	// Order is the platform's id of the payment: Alipay trade_no, WeChat
	// Pay transaction_id, Stripe's charge, PayPal's transaction (capture)
	// id. A refund row names the payment it refunds.
	Order         string
	MerchantOrder string
	// Refund is the refund's id as its notification names it (Alipay
	// out_biz_no, WeChat Pay out_refund_no, Stripe re_…, PayPal the
	// refund's transaction id).
	Refund string
	// Merchant is WeChat Pay's 商户号; SubMerchant its 特约商户号 (a service
	// provider's sub-merchant; empty: "0", an ordinary merchant).
	Merchant, SubMerchant string
	PaymentIntent         string
	// Amount is positive, in major units ("12.30"; JPY "500").
	Amount   string
	Currency string
	Time     time.Time
}

// Writer writes one bill.
type Writer interface {
	Row(r Row) error
	Close() error
}

var beijing = time.FixedZone("CST", 8*3600)

// cents reads an amount of at most two decimals as hundredths.
func cents(amount string) int64 {
	whole, frac, _ := strings.Cut(amount, ".")
	frac = (frac + "00")[:2]
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("billtest: amount %q", amount))
	}
	return n
}

func yuan(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

// --- Alipay 业务明细 ---

type alipay struct {
	w          *bufio.Writer
	count, net [2]int64
	rows       int
}

const alipayHeader = "支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户," +
	"订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称," +
	"商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注"

// NewAlipay starts Alipay's 业务明细 file for account (pid + 0156) and
// the period [from, to) (Beijing time), in GBK with CRLF line ends, as the
// download's zip holds it.
func NewAlipay(w io.Writer, account string, from, to time.Time) Writer {
	a := &alipay{w: bufio.NewWriterSize(w, 64<<10)}
	f, t := from.In(beijing).Format("2006年01月02日 15:04:05"), to.In(beijing).Format("2006年01月02日 15:04:05")
	for _, s := range []string{"#支付宝业务明细查询", "#账号：[" + account + "]",
		"#起始日期：[" + f + "]   终止日期：[" + t + "]",
		"#-----------------------------------------业务明细列表----------------------------------------", alipayHeader} {
		a.line(s)
	}
	return a
}

func (a *alipay) line(s string) {
	b, err := simplifiedchinese.GBK.NewEncoder().String(s)
	if err != nil {
		panic(err)
	}
	a.w.WriteString(b)
	a.w.WriteString("\r\n")
}

func (a *alipay) Row(r Row) error {
	if r.Kind == Payout {
		return fmt.Errorf("billtest: an Alipay trade bill has only 交易 and 退款 rows")
	}
	k, typ, sign := 0, "交易", int64(1)
	if r.Kind == Refund {
		k, typ, sign = 1, "退款", -1
	}
	c := sign * cents(r.Amount)
	a.count[k]++
	a.net[k] += c
	t := r.Time.In(beijing)
	a.line(strings.Join([]string{r.Order + "\t", r.MerchantOrder + "\t", typ + "\t", "会员续费",
		t.Add(-time.Minute).Format(time.DateTime), t.Format(time.DateTime), "alipay_store\t", "alipay_store\t", "alipay\t", "\t",
		"*津水(602***@qq.com)\t", yuan(c), yuan(c), "0.00", "0.00", "0.00", "0.00", "0.00", "", "0.00\t", "0.00",
		r.Refund + "\t", "0.00", "0.00", ""}, ","))
	return nil
}

func (a *alipay) Close() error {
	a.line("#-----------------------------------------业务明细列表结束------------------------------------")
	a.line(fmt.Sprintf("#交易合计：%d笔，商家实收共%s元，商家优惠共0.00元", a.count[0], yuan(a.net[0])))
	a.line(fmt.Sprintf("#退款合计：%d笔，商家实收退款共%s元，商家优惠退款共0.00元", a.count[1], yuan(a.net[1])))
	a.line("#导出时间：[" + time.Now().In(beijing).Format("2006年01月02日 15:04:05") + "]")
	return a.w.Flush()
}

// --- WeChat Pay trade bill, bill_type ALL ---

type wechat struct {
	w                *bufio.Writer
	rows             int
	settle, refunded int64
}

const wechatALL = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
	"应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率," +
	"订单金额,申请退款金额,费率备注"

// NewWeChatPay starts a WeChat Pay trade bill of type ALL, as a download
// gives it: a UTF-8 BOM, CRLF line ends.
func NewWeChatPay(w io.Writer) Writer {
	x := &wechat{w: bufio.NewWriterSize(w, 64<<10)}
	x.w.WriteString("\ufeff" + wechatALL + "\r\n")
	return x
}

func (x *wechat) Row(r Row) error {
	x.rows++
	amt := r.Amount
	state, settle, order, refundID, refundNo, refund, fee, apply := "SUCCESS", amt, amt, "0", "0", "0.00", "0.06000", "0.00"
	refundType, refundState := "", ""
	switch r.Kind {
	case Refund:
		state, settle, order, refund, fee, apply = "REFUND", "0.00", "0.00", amt, "-0.03000", amt
		refundID, refundNo, refundType, refundState = "50303"+r.Order[5:], r.Refund, "ORIGINAL", "SUCCESS"
		x.refunded += cents(amt)
	case Payout:
		state = "REVOKED"
		x.settle += cents(amt)
	default:
		x.settle += cents(amt)
	}
	sub := r.SubMerchant
	if sub == "" {
		sub = "0"
	}
	vals := []string{r.Time.In(beijing).Format(time.DateTime), "wx2421b1c4370ec43b", r.Merchant, sub, "", r.Order, r.MerchantOrder,
		"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "JSAPI", state, "CMB_DEBIT", "CNY", settle, "0.00", refundID, refundNo, refund, "0.00",
		refundType, refundState, "会员续费", "", fee, "0.60%", order, apply, ""}
	x.w.WriteString("`" + strings.Join(vals, ",`") + "\r\n")
	return nil
}

func (x *wechat) Close() error {
	x.w.WriteString("总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\r\n")
	fmt.Fprintf(x.w, "`%d,`%s,`%s,`0.00,`0.01000,`%s,`%s\r\n", x.rows, yuan(x.settle), yuan(x.refunded), yuan(x.settle), yuan(x.refunded))
	return x.w.Flush()
}
