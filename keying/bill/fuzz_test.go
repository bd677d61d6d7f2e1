package bill

import (
	"errors"
	"strings"
	"testing"
)

// Native fuzzing of every layout: whatever the bytes, Open and Next must
// not panic, rows must be sound and an error must say what kind it is.

func fuzzBill(f *testing.F, platform string, seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, sum, err := readAll(platform, data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrIncomplete) && !strings.Contains(err.Error(), "reading") {
				t.Fatalf("error %v is neither ErrMalformed nor ErrIncomplete", err)
			}
		} else if sum.Rows != len(rows) || (platform != "stripe" && !sum.Checked) {
			t.Fatalf("a whole bill of %d rows with summary %+v", len(rows), sum)
		}
		last := 0
		for _, r := range rows {
			if r.Line <= last {
				t.Fatalf("row on line %d after line %d", r.Line, last)
			}
			last = r.Line
			if r.Kind > Refund || len(r.Currency) != 3 || r.Minor < 0 {
				t.Fatalf("unsound row %+v", r)
			}
			if v, err := parseFixed([]byte(r.Amount), exponent(r.Currency)); err != nil || v != r.Minor {
				t.Fatalf("Amount %q and Minor %d disagree", r.Amount, r.Minor)
			}
		}
	})
}

func FuzzAlipay(f *testing.F) {
	fuzzBill(f, "alipay", billBytes(&alipayGen{}, 6), billBytes(&alipayGen{utf8: true, nl: "\n"}, 6),
		[]byte(strings.Join(aliLines(aliPay, aliRefund, aliEnd, "#交易合计：1笔，商家实收共9.90元，商家优惠共0.00元",
			"#退款合计：1笔，商家实收退款共-4.00元，商家优惠退款共0.00元"), "\n")))
}

func FuzzWeChatPay(f *testing.F) {
	fuzzBill(f, "wechatpay", billBytes(&wechatGen{kind: "ALL", bom: true, crlf: true}, 6),
		billBytes(&wechatGen{kind: "REFUND"}, 3), billBytes(&wechatGen{kind: "SUCCESS"}, 3),
		billBytes(&wechatGen{kind: "ALL", early: true}, 6),
		wxBill(wechatALL, wxPay, wxRefund, wxRevoked, wxSumHead, "`3,`7.00,`2.50,`0.00,`0.03100,`7.00,`2.50"))
}

func FuzzStripe(f *testing.F) {
	fuzzBill(f, "stripe", billBytes(&stripeGen{}, 6), billBytes(&stripeGen{itemized: true, currency: "jpy"}, 6),
		[]byte("id,Type,Source,Amount,Currency\ntxn_1,charge,ch_1,\"1.00\",usd\n"))
}

func FuzzPayPal(f *testing.F) {
	fuzzBill(f, "paypal", billBytes(&paypalGen{}, 6), billBytes(&paypalGen{perFile: 2}, 5),
		ppBill(append([]string{ppRH, ppFH, ppSH, paypalCH, ppPay, ppRefund, ppYen, ppOut}, ppFoot(4, 4)...)...))
}

func FuzzParseFixed(f *testing.F) {
	for _, s := range []string{"9.90", "-0.01", "0.0", "1000", "0.04000", "9.901", "", "1e3", "+.5"} {
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, scale uint8) {
		sc := int(scale % 6)
		v, err := parseFixed([]byte(s), sc)
		if err != nil {
			return
		}
		back, err := parseFixed([]byte(formatFixed(v, sc)), sc)
		if err != nil || back != v {
			t.Fatalf("%q at scale %d: %d formats as %q, which reads back as %d (%v)", s, sc, v, formatFixed(v, sc), back, err)
		}
	})
}
