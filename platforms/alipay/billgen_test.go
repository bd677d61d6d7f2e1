package alipay

import (
	"fmt"
	"strconv"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemgate/idemgate/internal/billcheck"
	"github.com/idemgate/idemgate/keying/bill"
)

// alipayGen writes Alipay's 业务明细 bill of generated rows
// (billcheck.EventAt), for the tests, the fuzz seeds and the benchmark.

type alipayGen struct {
	utf8     bool // write UTF-8 instead of GBK
	count    [2]int
	net      [2]int64
	nl       string
	enc      map[string][]byte
	noTotals bool
}

func (g *alipayGen) text(s string) []byte {
	if g.utf8 {
		return []byte(s)
	}
	if g.enc == nil {
		g.enc = map[string][]byte{}
	}
	if b, ok := g.enc[s]; ok {
		return b
	}
	b, err := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(s))
	if err != nil {
		panic(err)
	}
	g.enc[s] = b
	return b
}

const alipayHeader = "支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户," +
	"订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称," +
	"商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注"

func (g *alipayGen) newline() string {
	if g.nl == "" {
		return "\r\n"
	}
	return g.nl
}

func (g *alipayGen) Head(b []byte) []byte {
	nl := g.newline()
	for _, s := range []string{"#支付宝业务明细查询", "#账号：[20880211096256330156]",
		"#起始日期：[2026年10月03日 00:00:00]   终止日期：[2026年10月04日 00:00:00]",
		"#-----------------------------------------业务明细列表----------------------------------------", alipayHeader} {
		b = append(append(b, g.text(s)...), nl...)
	}
	return b
}

func alipayTrade(o int) string { return fmt.Sprintf("2026100322001458860%09d", o) }

func (g *alipayGen) Row(b []byte, i int) []byte {
	e := billcheck.EventAt(i, false)
	k, sign, typ := 0, int64(1), "交易"
	if e.Kind == bill.Refund {
		k, sign, typ = 1, -1, "退款"
	}
	g.count[k]++
	g.net[k] += sign * e.Fen
	b = append(b, "2026100322001458860"...)
	b = append(b, fmt.Sprintf("%09d", e.Order)...)
	b = append(b, "\t,M"...)
	b = strconv.AppendInt(b, int64(e.Order), 10)
	b = append(b, "\t,"...)
	b = append(b, g.text(typ)...)
	b = append(b, "\t,"...)
	b = append(b, g.text("会员续费")...)
	b = append(b, ',')
	b = billcheck.Stamp(b, e.At.Add(-time.Minute))
	b = append(b, ',')
	b = billcheck.Stamp(b, e.At)
	b = append(b, ",alipay_store\t,alipay_store\t,alipay\t,\t,"...)
	b = append(b, g.text("*津水(602***@qq.com)")...)
	b = append(b, "\t,"...)
	b = billcheck.Cents(b, sign*e.Fen)
	b = append(b, ',')
	b = billcheck.Cents(b, sign*e.Fen)
	b = append(b, ",0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,"...)
	if e.Kind == bill.Refund {
		b = append(b, 'R')
		b = strconv.AppendInt(b, int64(i), 10)
	}
	b = append(b, "\t,0.00,0.00,"...)
	return append(b, g.newline()...)
}

func (g *alipayGen) Tail(b []byte, n int) []byte {
	nl := g.newline()
	b = append(append(b, g.text("#-----------------------------------------业务明细列表结束------------------------------------")...), nl...)
	if !g.noTotals {
		b = append(b, g.text(fmt.Sprintf("#交易合计：%d笔，商家实收共%s元，商家优惠共0.00元", g.count[0], billcheck.Cents(nil, g.net[0])))...)
		b = append(b, nl...)
		b = append(b, g.text(fmt.Sprintf("#退款合计：%d笔，商家实收退款共%s元，商家优惠退款共0.00元", g.count[1], billcheck.Cents(nil, g.net[1])))...)
		b = append(b, nl...)
	}
	return append(append(b, g.text("#导出时间：[2026年10月04日 05:46:49]")...), nl...)
}

func alipayWant(i int) bill.Row {
	e := billcheck.EventAt(i, false)
	r := bill.Row{Line: 6 + i, Kind: e.Kind, Order: alipayTrade(e.Order), MerchantOrder: "M" + strconv.Itoa(e.Order),
		Amount: string(billcheck.Cents(nil, e.Fen)), Minor: e.Fen, Settled: string(billcheck.Cents(nil, e.Fen)), Currency: "CNY",
		Time: e.At, Type: "交易"}
	if e.Kind == bill.Refund {
		r.Type, r.Refund = "退款", "R"+strconv.Itoa(i)
	}
	return r
}
