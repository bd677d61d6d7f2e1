// Package alipaybill writes Alipay's 业务明细 bill (GBK, '#' head and
// totals, TAB after identifiers: the layout the platform's bill.go reads)
// for tests and sample bills. It is test support: no binary links it.
package alipaybill

import (
	"archive/zip"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/keying"
)

// billWriter is one bill being written.
type billWriter struct {
	w          *bufio.Writer
	count, net [2]int64
}

const billHeader = "支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户," +
	"订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称," +
	"商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注"

// NewWriter starts Alipay's 业务明细 file for account (pid + 0156)
// and the period [from, to) (Beijing time), in GBK with CRLF line ends, as
// the download's zip holds it.
func NewWriter(w io.Writer, account string, from, to time.Time) billtest.Writer {
	a := &billWriter{w: bufio.NewWriterSize(w, 64<<10)}
	f, t := from.In(keying.Beijing).Format("2006年01月02日 15:04:05"), to.In(keying.Beijing).Format("2006年01月02日 15:04:05")
	for _, s := range []string{"#支付宝业务明细查询", "#账号：[" + account + "]",
		"#起始日期：[" + f + "]   终止日期：[" + t + "]",
		"#-----------------------------------------业务明细列表----------------------------------------", billHeader} {
		a.line(s)
	}
	return a
}

func (a *billWriter) line(s string) {
	b, err := simplifiedchinese.GBK.NewEncoder().String(s)
	if err != nil {
		panic(err)
	}
	a.w.WriteString(b)
	a.w.WriteString("\r\n")
}

func (a *billWriter) Row(r billtest.Row) error {
	if r.Kind == billtest.Payout {
		return fmt.Errorf("alipay: a trade bill has only 交易 and 退款 rows")
	}
	k, typ, sign := 0, "交易", int64(1)
	if r.Kind == billtest.Refund {
		k, typ, sign = 1, "退款", -1
	}
	c := sign * billtest.Cents(r.Amount)
	a.count[k]++
	a.net[k] += c
	t := r.Time.In(keying.Beijing)
	a.line(strings.Join([]string{r.Order + "\t", r.MerchantOrder + "\t", typ + "\t", "会员续费",
		t.Add(-time.Minute).Format(time.DateTime), t.Format(time.DateTime), "alipay_store\t", "alipay_store\t", "alipay\t", "\t",
		"*津水(602***@qq.com)\t", billtest.Yuan(c), billtest.Yuan(c), "0.00", "0.00", "0.00", "0.00", "0.00", "", "0.00\t", "0.00",
		r.Refund + "\t", "0.00", "0.00", ""}, ","))
	return nil
}

func (a *billWriter) Close() error {
	a.line("#-----------------------------------------业务明细列表结束------------------------------------")
	a.line(fmt.Sprintf("#交易合计：%d笔，商家实收共%s元，商家优惠共0.00元", a.count[0], billtest.Yuan(a.net[0])))
	a.line(fmt.Sprintf("#退款合计：%d笔，商家实收退款共%s元，商家优惠退款共0.00元", a.count[1], billtest.Yuan(a.net[1])))
	a.line("#导出时间：[" + time.Now().In(keying.Beijing).Format("2006年01月02日 15:04:05") + "]")
	return a.w.Flush()
}

// Sample is a day's 业务明细 of the test signer's account, and the
// zip the download puts it in (its …_业务明细(汇总).csv, a summary
// reconciliation does not read, left out).
var Sample = billtest.Sample{
	Name: "alipay", Zone: keying.Beijing, Currency: "CNY", Account: "20881021772966100156",
	PaymentID: func(day time.Time, i int) string { return fmt.Sprintf("%s22001458860%09d", day.Format("20060102"), i) },
	RefundID:  func(i int) string { return fmt.Sprintf("R%d", i) },
	Files: func(day time.Time, account string, rows []billtest.Row) []billtest.File {
		ymd := day.Format("20060102")
		name := account + "_" + ymd + "_业务明细.csv"
		b := billtest.Bytes(func(w io.Writer) billtest.Writer { return NewWriter(w, account, day, day.AddDate(0, 0, 1)) }, rows)
		return []billtest.File{{Name: name, Data: b}, {Name: account + "_" + ymd + ".csv.zip", Data: zipOf(name, b)}}
	},
}

func zipOf(name string, b []byte) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Now()})
	if err == nil {
		_, err = w.Write(b)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		panic(err) // writing to memory
	}
	return buf.Bytes()
}
