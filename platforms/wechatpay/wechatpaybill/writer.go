// Package wechatpaybill writes WeChat Pay's trade bill of type ALL
// (backquoted values, the summary after them: the layout the platform's
// bill.go reads) for tests and sample bills. It is test support: no
// binary links it.
package wechatpaybill

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
)

// billWriter is one bill being written.
type billWriter struct {
	w                *bufio.Writer
	rows             int
	settle, refunded int64
}

const billALL = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
	"应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率," +
	"订单金额,申请退款金额,费率备注"

// NewWriter starts a trade bill of type ALL, as a download gives it: a
// UTF-8 BOM, CRLF line ends. A row's Merchant is its 商户号, SubMerchant
// its 特约商户号.
func NewWriter(w io.Writer) billtest.Writer {
	x := &billWriter{w: bufio.NewWriterSize(w, 64<<10)}
	x.w.WriteString("\ufeff" + billALL + "\r\n")
	return x
}

func (x *billWriter) Row(r billtest.Row) error {
	x.rows++
	amt := r.Amount
	state, settle, order, refundID, refundNo, refund, fee, apply := "SUCCESS", amt, amt, "0", "0", "0.00", "0.06000", "0.00"
	refundType, refundState := "", ""
	switch r.Kind {
	case billtest.Refund:
		state, settle, order, refund, fee, apply = "REFUND", "0.00", "0.00", amt, "-0.03000", amt
		refundID, refundNo, refundType, refundState = "50303"+r.Order[5:], r.Refund, "ORIGINAL", "SUCCESS"
		x.refunded += billtest.Cents(amt)
	case billtest.Payout:
		state = "REVOKED"
		x.settle += billtest.Cents(amt)
	default:
		x.settle += billtest.Cents(amt)
	}
	sub := r.SubMerchant
	if sub == "" {
		sub = "0"
	}
	vals := []string{r.Time.In(keying.Beijing).Format(time.DateTime), "wx2421b1c4370ec43b", r.Merchant, sub, "", r.Order, r.MerchantOrder,
		"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "JSAPI", state, "CMB_DEBIT", "CNY", settle, "0.00", refundID, refundNo, refund, "0.00",
		refundType, refundState, "会员续费", "", fee, "0.60%", order, apply, ""}
	x.w.WriteString("`" + strings.Join(vals, ",`") + "\r\n")
	return nil
}

func (x *billWriter) Close() error {
	x.w.WriteString("总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额\r\n")
	fmt.Fprintf(x.w, "`%d,`%s,`%s,`0.00,`0.01000,`%s,`%s\r\n", x.rows, billtest.Yuan(x.settle), billtest.Yuan(x.refunded),
		billtest.Yuan(x.settle), billtest.Yuan(x.refunded))
	return x.w.Flush()
}

// Sample is a day's trade bill of the test signer's 商户号 (the
// account), every row that merchant's.
var Sample = billtest.Sample{
	Name: "wechatpay", Zone: keying.Beijing, Currency: "CNY", Account: "1230000109",
	PaymentID: func(day time.Time, i int) string { return fmt.Sprintf("42000009%s%012d", day.Format("20060102"), i) },
	RefundID:  func(i int) string { return fmt.Sprintf("R%d", i) },
	Files: func(day time.Time, account string, rows []billtest.Row) []billtest.File {
		for i := range rows {
			rows[i].Merchant = account
		}
		return []billtest.File{{Name: "wechatpay_tradebill_" + day.Format("20060102") + "_ALL.csv", Data: billtest.Bytes(NewWriter, rows)}}
	},
}
