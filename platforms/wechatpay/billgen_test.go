package wechatpay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/keying/bill"
)

// wechatGen writes bill_type ALL, SUCCESS or REFUND, or the early ALL.
type wechatGen struct {
	kind   string // "ALL", "SUCCESS", "REFUND"
	early  bool
	bom    bool
	crlf   bool
	rows   int
	settle int64 // Σ应结订单金额 (early: Σ总金额)
	refund int64 // Σ退款金额
}

const (
	wechatALL = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
		"应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率," +
		"订单金额,申请退款金额,费率备注"
	wechatSUCCESS = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
		"应结订单金额,代金券金额,商品名称,商户数据包,手续费,费率,订单金额,费率备注"
	wechatREFUND = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
		"应结订单金额,代金券金额,退款申请时间,退款成功时间,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称," +
		"商户数据包,手续费,费率,订单金额,申请退款金额,费率备注"
	wechatEarly = "交易时间,公众账号ID,商户号,子商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类," +
		"总金额,代金券或立减优惠金额,微信退款单号,商户退款单号,退款金额,代金券或立减优惠退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率"
)

func (g *wechatGen) nl() string {
	if g.crlf {
		return "\r\n"
	}
	return "\n"
}

func (g *wechatGen) Head(b []byte) []byte {
	if g.bom {
		b = append(b, "\xef\xbb\xbf"...)
	}
	h := map[string]string{"ALL": wechatALL, "SUCCESS": wechatSUCCESS, "REFUND": wechatREFUND}[g.kind]
	if g.early {
		h = wechatEarly
	}
	return append(append(b, h...), g.nl()...)
}

// wechatEvent maps row i onto this bill's type: SUCCESS holds payments
// only, REFUND refunds only.
func (g *wechatGen) event(i int) (billcheck.Event, int) {
	switch g.kind {
	case "SUCCESS":
		i = i/4*5 + i%4 // skip every fifth event, the refunds
	case "REFUND":
		i = i*5 + 4
	}
	return billcheck.EventAt(i, false), i
}

func wechatTxn(o int) string { return fmt.Sprintf("42000009252026100%011d", o) }

func (g *wechatGen) Row(b []byte, n int) []byte {
	e, i := g.event(n)
	g.rows++
	f := func(s ...string) {
		for _, v := range s {
			b = append(b, '`')
			b = append(b, v...)
			b = append(b, ',')
		}
	}
	amt := string(billcheck.Cents(nil, e.Fen))
	b = append(b, '`')
	b = billcheck.Stamp(b, e.At)
	b = append(b, ',')
	f("wx2421b1c4370ec43b", "1900000109", "0", "", wechatTxn(e.Order), "M"+strconv.Itoa(e.Order),
		"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "JSAPI")
	pay := e.Kind == bill.Payment
	if pay {
		f("SUCCESS")
	} else {
		f("REFUND")
	}
	f("CMB_DEBIT", "CNY")
	settle := amt
	if !pay {
		settle = "0.00"
	}
	f(settle, "0.00")
	if pay {
		g.settle += e.Fen
	} else {
		g.refund += e.Fen
	}
	if g.kind == "REFUND" {
		f(string(billcheck.Stamp(nil, e.At)), string(billcheck.Stamp(nil, e.At.Add(4*time.Second))))
	}
	if g.kind != "SUCCESS" {
		if pay {
			f("0", "0", "0.00", "0.00", "", "")
		} else {
			f(fmt.Sprintf("503031085620261003%010d", i), "R"+strconv.Itoa(i), amt, "0.00", "ORIGINAL", "SUCCESS")
		}
	}
	f("会员续费", "")
	if pay {
		f("0.06000")
	} else {
		f("-0.03000")
	}
	if g.early {
		b = append(b, "`0.60%"...)
		return append(b, g.nl()...)
	}
	f("0.60%")
	if pay {
		f(amt)
	} else {
		f("0.00")
	}
	if g.kind != "SUCCESS" {
		if pay {
			f("0.00")
		} else {
			f(amt)
		}
	}
	b = append(b, '`')
	return append(b, g.nl()...)
}

func (g *wechatGen) Tail(b []byte, n int) []byte {
	nl := g.nl()
	switch {
	case g.early:
		b = append(b, "总交易单数,总交易额,总退款金额,总代金券或立减优惠退款金额,手续费总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`%s,`0.0,`0", g.rows, billcheck.Cents(nil, g.settle), billcheck.Cents(nil, g.refund))...)
	case g.kind == "SUCCESS":
		b = append(b, "总交易单数,应结订单总金额,手续费总金额,订单总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`0.01000,`%s", g.rows, billcheck.Cents(nil, g.settle), billcheck.Cents(nil, g.settle))...)
	default:
		b = append(b, "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`%s,`0.00,`0.01000,`%s,`%s", g.rows, billcheck.Cents(nil, g.settle),
			billcheck.Cents(nil, g.refund), billcheck.Cents(nil, g.settle), billcheck.Cents(nil, g.refund))...)
	}
	return append(b, nl...)
}

func (g *wechatGen) want(n int) bill.Row {
	e, i := g.event(n)
	amt := string(billcheck.Cents(nil, e.Fen))
	r := bill.Row{Line: 2 + n, Kind: e.Kind, Order: wechatTxn(e.Order), Merchant: "1900000109", MerchantOrder: "M" + strconv.Itoa(e.Order),
		Amount: amt, Minor: e.Fen, Settled: amt, Currency: "CNY", Time: e.At, Type: "SUCCESS", Status: "SUCCESS"}
	if e.Kind == bill.Refund {
		r.Type, r.Refund, r.ID = "REFUND", "R"+strconv.Itoa(i), fmt.Sprintf("503031085620261003%010d", i)
	}
	return r
}
