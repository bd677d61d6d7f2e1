package wechatpay

import (
	"bytes"
	"io"
	"regexp"
	"strings"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
)

// WeChat Pay's trade bill (交易账单): v2 pay/downloadbill and v3
// GET /v3/bill/tradebill (download_url) give the same file.
//
// Layout, from pay.weixin.qq.com/docs/merchant/products/bill-download/format-trade.html
// (交易账单文件格式说明) and pay.weixin.qq.com/wiki/doc/api/wxpay/ch/pay/NativePay/chapter8_6.shtml:
// four parts — the detail header, detail rows, the summary header and one
// summary row; comma separated, nothing quoted; every detail and summary
// value starts with one backquote (against Excel's scientific notation),
// the two headers have none. The columns differ per bill_type: ALL (27),
// SUCCESS (no refund columns), REFUND (退款申请时间, 退款成功时间 added),
// and merchants on the early format get 24 columns with 总金额 for
// 应结订单金额. Columns are therefore found by name, never by position.
//
// Checked against binarywang/WxJava
// weixin-java-pay/src/test/java/com/github/binarywang/wxpay/bean/result/WxPayBillResultTest.java
// (ALL, SUCCESS, REFUND and the early ALL format, whose sample writes
// "16：33：45" and amounts "0.0", "0") and wechatpay-apiv3/wechatpay-go
// core/client_test.go (TestDownloadForClient: three NATIVE payments and
// their summary). Captures start with a UTF-8 BOM and end lines with \r\n
// (TheNorthMemory/wechatpay-axios-plugin's README); both are handled.

type tradeBill struct {
	bill.Base
	f                                   [][]byte // the fields of the line read, reused
	width                               int      // columns of the detail header
	iTime, iTxn, iOut, iState, iCur     int
	iMch, iSub                          int // 商户号, 特约商户号
	iTotal, iSettle                     int // 订单金额 (or the early 总金额), 应结订单金额
	iRefundID, iOutRefund, iRefundState int
	iRefundReq, iRefundSettled          int // 申请退款金额, 退款金额
	sums                                []colSum
	summaryLine                         int
}

// colSum adds up one amount column, in fen, for the summary check.
type colSum struct {
	name string
	i    int
	sum  int64
}

// wechatTotals pairs each summary column with the detail column it adds up.
// 手续费总金额 is left out on purpose: fees carry 5 decimals and nothing
// documents how their total is rounded, so checking it could refuse whole
// bills; the count and the amount columns already catch a truncation.
var wechatTotals = map[string]string{
	"应结订单总金额":       "应结订单金额",
	"退款总金额":         "退款金额",
	"充值券退款总金额":      "充值券退款金额",
	"订单总金额":         "订单金额",
	"申请退款总金额":       "申请退款金额",
	"总交易额":          "总金额",
	"总退款金额":         "退款金额",
	"总代金券或立减优惠退款金额": "代金券或立减优惠退款金额",
	"总企业红包退款金额":     "企业红包退款金额",
}

// xmlMsg finds the reason in a v2 failure answer (<return_msg>No Bill Exist</return_msg>).
var xmlMsg = regexp.MustCompile(`<(?:return_msg|err_code_des)>(?:<!\[CDATA\[)?([^<\]]*)`)

// Bill is WeChat Pay's bill, one for both API versions.
var Bill = &bill.Traits{Format: billFormat, Zone: keying.Beijing,
	RefundNote: "WeChat Pay's bill dates a refund by its acceptance, its notification by its success: it may be in the bill of the day before"}

// billFormat is WeChat Pay's trade bill, the same for API v3 and v2.
var billFormat = bill.NewFormat("wechatpay", openWeChat)

func openWeChat(b *bill.Base) (bill.Parser, error) {
	head, err := b.Line()
	if err != nil {
		if err == io.EOF {
			return nil, b.Whole(bill.ErrIncomplete, "the bill is empty")
		}
		return nil, b.Read(err)
	}
	switch t := bytes.TrimSpace(head); {
	case bytes.HasPrefix(t, []byte("<xml")):
		msg := "the download answered an error, not a bill"
		if m := xmlMsg.FindSubmatch(t); m != nil {
			msg += ": " + string(m[1])
		}
		return nil, &bill.Error{Platform: b.Platform(), Line: 1, Err: bill.ErrMalformed, Msg: msg}
	case bytes.HasPrefix(t, []byte("{")):
		return nil, &bill.Error{Platform: b.Platform(), Line: 1, Err: bill.ErrMalformed, Msg: "the download answered JSON (an API error?), not a bill: " + bill.Clip(t)}
	}
	w := &tradeBill{Base: *b}
	cols := bill.Columns{}
	hf := bill.SplitPlain(nil, head)
	for i, name := range hf {
		cols[string(bill.Trim(name))] = i
	}
	w.width = len(hf)
	if miss := cols.Missing([]string{"交易时间"}, []string{"微信订单号"}, []string{"商户订单号"},
		[]string{"交易状态"}, []string{"订单金额", "总金额"}); len(miss) > 0 {
		return nil, b.BadAt(1, "not a WeChat Pay trade bill header: no %s column (header %s)",
			strings.Join(miss, ", "), bill.Clip(head))
	}
	w.iTime, w.iTxn, w.iOut, w.iState = cols["交易时间"], cols["微信订单号"], cols["商户订单号"], cols["交易状态"]
	w.iCur = cols.Index("货币种类")
	w.iMch, w.iSub = cols.Index("商户号"), cols.Index("特约商户号")
	w.iTotal = cols.Index("订单金额", "总金额")
	w.iSettle = cols.Index("应结订单金额", "总金额")
	w.iRefundID = cols.Index("微信退款单号")
	w.iOutRefund = cols.Index("商户退款单号")
	w.iRefundState = cols.Index("退款状态")
	w.iRefundReq = cols.Index("申请退款金额", "退款金额")
	w.iRefundSettled = cols.Index("退款金额")
	for _, detail := range wechatTotals {
		if i := cols.Index(detail); i >= 0 && !w.summing(detail) {
			w.sums = append(w.sums, colSum{name: detail, i: i})
		}
	}
	layout := "wechatpay SUCCESS"
	switch {
	case cols.Index("退款申请时间") >= 0:
		layout = "wechatpay REFUND"
	case w.iOutRefund >= 0:
		layout = "wechatpay ALL"
	}
	if cols.Index("总金额") >= 0 {
		layout += " (early 24-column format)"
	}
	w.Sum.Layout = layout
	return w, nil
}

func (w *tradeBill) summing(name string) bool {
	for _, s := range w.sums {
		if s.name == name {
			return true
		}
	}
	return false
}

func (w *tradeBill) Next() (bill.Row, error) {
	for {
		line, err := w.Line()
		if err == io.EOF {
			return bill.Row{}, w.Whole(bill.ErrIncomplete,
				"no summary (总交易单数,…) after %d rows: the download is truncated", w.Sum.Rows)
		}
		if err != nil {
			return bill.Row{}, w.Read(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		w.f = bill.SplitPlain(w.f, line)
		if string(bill.Trim(w.f[0])) == "总交易单数" {
			return bill.Row{}, w.summary()
		}
		return w.row()
	}
}

func (w *tradeBill) row() (bill.Row, error) {
	f := w.f
	if len(f) != w.width {
		return bill.Row{}, w.Bad("%d values where the header has %d columns (a comma inside a value?)", len(f), w.width)
	}
	for i, v := range f {
		if len(v) == 0 || v[0] != '`' {
			return bill.Row{}, w.Bad("value %d (%s) lacks the leading backquote of a detail row", i+1, bill.Clip(v))
		}
		f[i] = bill.Trim(v[1:])
	}
	for k := range w.sums {
		s := &w.sums[k]
		v, err := bill.ParseFixed(f[s.i], 2)
		if err != nil {
			return bill.Row{}, w.Bad("%s: %s is not an amount", s.name, bill.Clip(f[s.i]))
		}
		s.sum += v
	}
	row := bill.Row{Line: w.LineNo(), Order: string(f[w.iTxn]), MerchantOrder: string(f[w.iOut]), Currency: "CNY",
		Merchant: w.Intern(bill.At(f, w.iMch), false)}
	// A service provider's (服务商) bill names its sub-merchant in 特约商户号
	// ("0" for an ordinary merchant): the order is the sub-merchant's, as
	// its notification's sub_mchid says.
	if sub := bill.At(f, w.iSub); len(sub) > 0 && string(sub) != "0" {
		row.Provider, row.Merchant = row.Merchant, w.Intern(sub, false)
	}
	if c := bill.At(f, w.iCur); len(c) > 0 {
		row.Currency = w.Intern(c, true)
		if !bill.IsCurrency(row.Currency) {
			return bill.Row{}, w.Bad("货币种类 %s is not an ISO 4217 code", bill.Clip(c))
		}
	}
	t, err := bill.ParseClock(halfWidthTime(f[w.iTime]), keying.Beijing)
	if err != nil {
		return bill.Row{}, w.Bad("交易时间 %s is not a time (yyyy-MM-dd HH:mm:ss)", bill.Clip(f[w.iTime]))
	}
	row.Time = t
	state := w.Intern(f[w.iState], false)
	row.Type, row.Status = state, state
	amountCol, settledCol := w.iTotal, w.iSettle
	switch state {
	case "SUCCESS":
		row.Kind = bill.Payment
	case "REFUND":
		row.Kind = bill.Refund
		row.Refund = string(bill.At(f, w.iOutRefund))
		row.ID = string(bill.At(f, w.iRefundID))
		if row.Refund == "" || row.Refund == "0" {
			return bill.Row{}, w.Bad("a REFUND row without 商户退款单号")
		}
		if s := bill.At(f, w.iRefundState); len(s) > 0 {
			row.Status = w.Intern(s, false)
		}
		amountCol, settledCol = w.iRefundReq, w.iRefundSettled
	default:
		row.Kind = bill.Other // REVOKED: a payment cancelled; its money went back
	}
	if row.Order == "" {
		return bill.Row{}, w.Bad("no 微信订单号")
	}
	if row.Amount, row.Minor, err = w.amount(f, amountCol, row.Kind, row.Currency); err != nil {
		return bill.Row{}, err
	}
	if settledCol >= 0 {
		if row.Settled, _, err = w.amount(f, settledCol, row.Kind, row.Currency); err != nil {
			return bill.Row{}, err
		}
	}
	return row, nil
}

// amount reads column i: WeChat Pay writes refunds as positive amounts.
func (w *tradeBill) amount(f [][]byte, i int, k bill.Kind, currency string) (string, int64, error) {
	if i < 0 {
		return "", 0, w.Bad("a %s row in a bill without the columns for its amount", k)
	}
	v, err := bill.ParseFixed(f[i], bill.Exponent(currency))
	if err != nil || v < 0 {
		return "", 0, w.Bad("%s amount %s is not a positive %s amount", k, bill.Clip(f[i]), currency)
	}
	s, m, _ := bill.AmountOf(v, bill.Exponent(currency), currency)
	return s, m, nil
}

// summary reads the summary header (in w.f) and its row, checks them
// against the rows read and then requires the end of the bill.
func (w *tradeBill) summary() error {
	headLine := w.LineNo()
	names := make([]string, len(w.f))
	for i, n := range w.f {
		names[i] = string(bill.Trim(n))
	}
	var line []byte
	for {
		var err error
		line, err = w.Line()
		if err == io.EOF {
			return w.Whole(bill.ErrIncomplete, "the summary header on line %d has no summary row: the download is truncated", headLine)
		}
		if err != nil {
			return w.Read(err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			break
		}
	}
	w.f = bill.SplitPlain(w.f, line)
	if len(w.f) != len(names) {
		return w.Bad("the summary row has %d values, its header %d", len(w.f), len(names))
	}
	for i, name := range names {
		v := bill.Trim(bytes.TrimPrefix(w.f[i], []byte("`")))
		if name == "总交易单数" {
			n, ok := bill.Digits(v)
			if !ok || len(v) == 0 {
				return w.Bad("总交易单数 %s is not a count", bill.Clip(v))
			}
			if n != w.Sum.Rows {
				return w.Disagree(w.LineNo(), "the summary counts %d rows (总交易单数), the bill has %d: it is incomplete or altered", n, w.Sum.Rows)
			}
			continue
		}
		detail, ok := wechatTotals[name]
		if !ok {
			continue
		}
		for _, s := range w.sums {
			if s.name != detail {
				continue
			}
			total, err := bill.ParseFixed(v, 2)
			if err != nil {
				return w.Bad("%s %s is not an amount", name, bill.Clip(v))
			}
			if total != s.sum {
				return w.Disagree(w.LineNo(), "%s says %s, the rows' %s add up to %s", name, bill.FormatFixed(total, 2), detail, bill.FormatFixed(s.sum, 2))
			}
		}
	}
	w.summaryLine = w.LineNo()
	for {
		line, err := w.Line()
		if err == io.EOF {
			w.Sum.Checked = true
			return io.EOF
		}
		if err != nil {
			return w.Read(err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			return w.Bad("text after the summary row (line %d): %s", w.summaryLine, bill.Clip(line))
		}
	}
}

// fullWidthColon is '：' in UTF-8: WeChat Pay's documented sample of the
// early format writes "16：33：45".
var fullWidthColon = []byte("：")

// halfWidthTime rewrites full-width colons in a time value; most values
// have none and are returned as they are.
func halfWidthTime(b []byte) []byte {
	if bytes.Contains(b, fullWidthColon) {
		return bytes.ReplaceAll(b, fullWidthColon, []byte(":"))
	}
	return b
}
