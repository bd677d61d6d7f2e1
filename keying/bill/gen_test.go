package bill

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// The bills the tests read are generated here, modelled on the documented
// layouts (see each parser's comment for its sources): payments, partial
// refunds of them, and — for Stripe and PayPal — rows that are neither.
// The same generators stream the 1M-row bills of the benchmarks.

// event is row i of a generated bill.
type event struct {
	kind  Kind
	order int   // the order's number
	fen   int64 // minor units
	at    time.Time
}

var day = time.Date(2026, 10, 3, 0, 0, 0, 0, beijing)

// eventAt: every fifth row refunds half of the order two rows back; for
// platforms with other rows, every fiftieth is a payout.
func eventAt(i int, others bool) event {
	at := day.Add(time.Duration(i%86000) * time.Second)
	switch {
	case others && i%50 == 49:
		return event{kind: Other, order: i, fen: 100000 + int64(i), at: at}
	case i%5 == 4:
		o := i - 2
		return event{kind: Refund, order: o, fen: max(orderFen(o)/2, 1), at: at}
	}
	return event{kind: Payment, order: i, fen: orderFen(i), at: at}
}

func orderFen(o int) int64 { return 100 + int64(o*37%99900) }

// cents writes fen as yuan: 990 → "9.90".
func cents(b []byte, fen int64) []byte {
	if fen < 0 {
		b = append(b, '-')
		fen = -fen
	}
	b = strconv.AppendInt(b, fen/100, 10)
	b = append(b, '.', byte('0'+fen/10%10), byte('0'+fen%10))
	return b
}

func stamp(b []byte, t time.Time) []byte { return t.AppendFormat(b, "2006-01-02 15:04:05") }

// genReader streams a bill: head, n rows, then the tail, which may use
// what the rows added up.
type genReader struct {
	g   generator
	n   int
	i   int // next row
	buf []byte
	off int
	end bool
}

type generator interface {
	head(b []byte) []byte
	row(b []byte, i int) []byte
	tail(b []byte, n int) []byte
}

func newGen(g generator, n int) *genReader {
	return &genReader{g: g, n: n, buf: g.head(nil)}
}

func (r *genReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.end {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for len(r.buf) < 32<<10 && r.i < r.n {
			r.buf = r.g.row(r.buf, r.i)
			r.i++
		}
		if r.i == r.n {
			r.buf = r.g.tail(r.buf, r.n)
			r.end = true
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

func billBytes(g generator, n int) []byte {
	b, err := io.ReadAll(newGen(g, n))
	if err != nil {
		panic(err)
	}
	return b
}

// --- Alipay 业务明细 ---

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

func (g *alipayGen) head(b []byte) []byte {
	nl := g.newline()
	for _, s := range []string{"#支付宝业务明细查询", "#账号：[20880211096256330156]",
		"#起始日期：[2026年10月03日 00:00:00]   终止日期：[2026年10月04日 00:00:00]",
		"#-----------------------------------------业务明细列表----------------------------------------", alipayHeader} {
		b = append(append(b, g.text(s)...), nl...)
	}
	return b
}

func alipayTrade(o int) string { return fmt.Sprintf("2026100322001458860%09d", o) }

func (g *alipayGen) row(b []byte, i int) []byte {
	e := eventAt(i, false)
	k, sign, typ := 0, int64(1), "交易"
	if e.kind == Refund {
		k, sign, typ = 1, -1, "退款"
	}
	g.count[k]++
	g.net[k] += sign * e.fen
	b = append(b, "2026100322001458860"...)
	b = append(b, fmt.Sprintf("%09d", e.order)...)
	b = append(b, "\t,M"...)
	b = strconv.AppendInt(b, int64(e.order), 10)
	b = append(b, "\t,"...)
	b = append(b, g.text(typ)...)
	b = append(b, "\t,"...)
	b = append(b, g.text("会员续费")...)
	b = append(b, ',')
	b = stamp(b, e.at.Add(-time.Minute))
	b = append(b, ',')
	b = stamp(b, e.at)
	b = append(b, ",alipay_store\t,alipay_store\t,alipay\t,\t,"...)
	b = append(b, g.text("*津水(602***@qq.com)")...)
	b = append(b, "\t,"...)
	b = cents(b, sign*e.fen)
	b = append(b, ',')
	b = cents(b, sign*e.fen)
	b = append(b, ",0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,"...)
	if e.kind == Refund {
		b = append(b, 'R')
		b = strconv.AppendInt(b, int64(i), 10)
	}
	b = append(b, "\t,0.00,0.00,"...)
	return append(b, g.newline()...)
}

func (g *alipayGen) tail(b []byte, n int) []byte {
	nl := g.newline()
	b = append(append(b, g.text("#-----------------------------------------业务明细列表结束------------------------------------")...), nl...)
	if !g.noTotals {
		b = append(b, g.text(fmt.Sprintf("#交易合计：%d笔，商家实收共%s元，商家优惠共0.00元", g.count[0], cents(nil, g.net[0])))...)
		b = append(b, nl...)
		b = append(b, g.text(fmt.Sprintf("#退款合计：%d笔，商家实收退款共%s元，商家优惠退款共0.00元", g.count[1], cents(nil, g.net[1])))...)
		b = append(b, nl...)
	}
	return append(append(b, g.text("#导出时间：[2026年10月04日 05:46:49]")...), nl...)
}

func alipayWant(i int) Row {
	e := eventAt(i, false)
	r := Row{Line: 6 + i, Kind: e.kind, Order: alipayTrade(e.order), MerchantOrder: "M" + strconv.Itoa(e.order),
		Amount: string(cents(nil, e.fen)), Minor: e.fen, Settled: string(cents(nil, e.fen)), Currency: "CNY",
		Time: e.at, Type: "交易"}
	if e.kind == Refund {
		r.Type, r.Refund = "退款", "R"+strconv.Itoa(i)
	}
	return r
}

// --- WeChat Pay trade bill ---

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

func (g *wechatGen) head(b []byte) []byte {
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
func (g *wechatGen) event(i int) (event, int) {
	switch g.kind {
	case "SUCCESS":
		i = i/4*5 + i%4 // skip every fifth event, the refunds
	case "REFUND":
		i = i*5 + 4
	}
	return eventAt(i, false), i
}

func wechatTxn(o int) string { return fmt.Sprintf("42000009252026100%011d", o) }

func (g *wechatGen) row(b []byte, n int) []byte {
	e, i := g.event(n)
	g.rows++
	f := func(s ...string) {
		for _, v := range s {
			b = append(b, '`')
			b = append(b, v...)
			b = append(b, ',')
		}
	}
	amt := string(cents(nil, e.fen))
	b = append(b, '`')
	b = stamp(b, e.at)
	b = append(b, ',')
	f("wx2421b1c4370ec43b", "1900000109", "0", "", wechatTxn(e.order), "M"+strconv.Itoa(e.order),
		"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o", "JSAPI")
	pay := e.kind == Payment
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
		g.settle += e.fen
	} else {
		g.refund += e.fen
	}
	if g.kind == "REFUND" {
		f(string(stamp(nil, e.at)), string(stamp(nil, e.at.Add(4*time.Second))))
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

func (g *wechatGen) tail(b []byte, n int) []byte {
	nl := g.nl()
	switch {
	case g.early:
		b = append(b, "总交易单数,总交易额,总退款金额,总代金券或立减优惠退款金额,手续费总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`%s,`0.0,`0", g.rows, cents(nil, g.settle), cents(nil, g.refund))...)
	case g.kind == "SUCCESS":
		b = append(b, "总交易单数,应结订单总金额,手续费总金额,订单总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`0.01000,`%s", g.rows, cents(nil, g.settle), cents(nil, g.settle))...)
	default:
		b = append(b, "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"+nl...)
		b = append(b, fmt.Sprintf("`%d,`%s,`%s,`0.00,`0.01000,`%s,`%s", g.rows, cents(nil, g.settle),
			cents(nil, g.refund), cents(nil, g.settle), cents(nil, g.refund))...)
	}
	return append(b, nl...)
}

func (g *wechatGen) want(n int) Row {
	e, i := g.event(n)
	amt := string(cents(nil, e.fen))
	r := Row{Line: 2 + n, Kind: e.kind, Order: wechatTxn(e.order), Merchant: "1900000109", MerchantOrder: "M" + strconv.Itoa(e.order),
		Amount: amt, Minor: e.fen, Settled: amt, Currency: "CNY", Time: e.at, Type: "SUCCESS", Status: "SUCCESS"}
	if e.kind == Refund {
		r.Type, r.Refund, r.ID = "REFUND", "R"+strconv.Itoa(i), fmt.Sprintf("503031085620261003%010d", i)
	}
	return r
}
