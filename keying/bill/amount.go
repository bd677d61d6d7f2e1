package bill

import (
	"errors"
	"strconv"
)

// errAmount is wrapped into a line error by the caller, which knows the line
// and the column.
var errAmount = errors.New("not a decimal amount")

// maxFixed bounds every amount and every sum, far below int64's range, so
// that sums of a million rows cannot overflow before they are checked.
const maxFixed = 1 << 62

// ParseFixed reads a plain decimal ("-12.30", "0", "5.", ".5") into an integer
// of 10^-scale units, exactly: fraction digits beyond scale must be zeros
// ("9.900" at scale 2 is 990; "9.901" is an error). No exponent, no thousands
// separator, no currency sign — none of the bills writes them, and guessing
// would turn a misread column into a wrong amount.
func ParseFixed(b []byte, scale int) (int64, error) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	var v int64
	digits, frac := 0, -1
	for _, c := range b {
		switch {
		case c == '.' && frac < 0:
			frac = 0
		case c >= '0' && c <= '9':
			digits++
			if frac >= 0 {
				frac++
				if frac > scale {
					if c != '0' {
						return 0, errAmount
					}
					continue
				}
			}
			v = v*10 + int64(c-'0')
			if v >= maxFixed/10 {
				return 0, errAmount
			}
		default:
			return 0, errAmount
		}
	}
	if digits == 0 {
		return 0, errAmount
	}
	if frac < 0 {
		frac = 0
	}
	for ; frac < scale; frac++ {
		v *= 10
		if v >= maxFixed/10 {
			return 0, errAmount
		}
	}
	if neg {
		v = -v
	}
	return v, nil
}

// FormatFixed writes v units of 10^-scale as a decimal with exactly scale
// fraction digits: FormatFixed(990, 2) is "9.90", FormatFixed(5, 0) is "5".
func FormatFixed(v int64, scale int) string {
	neg := v < 0
	if neg {
		v = -v
	}
	var dbuf [24]byte
	d := strconv.AppendInt(dbuf[:0], v, 10)
	var obuf [48]byte
	b := obuf[:0]
	if neg {
		b = append(b, '-')
	}
	if len(d) <= scale {
		b = append(b, '0', '.')
		for i := len(d); i < scale; i++ {
			b = append(b, '0')
		}
		return string(append(b, d...))
	}
	b = append(b, d[:len(d)-scale]...)
	if scale > 0 {
		b = append(b, '.')
		b = append(b, d[len(d)-scale:]...)
	}
	return string(b)
}

// Exponent is the number of minor-unit digits of an ISO 4217 currency: 2
// unless listed. The zero- and three-decimal lists are ISO 4217's, which
// are also the lists Stripe documents for its amounts
// (docs.stripe.com/currencies#zero-decimal, #three-decimal).
func Exponent(currency string) int {
	switch currency {
	case "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG",
		"RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		return 3
	}
	return 2
}

// IsCurrency says whether s is shaped like an ISO 4217 code: three
// letters A–Z (the caller upper-cases first).
func IsCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// AmountOf turns units of 10^-scale into a Row's Amount and Minor for
// currency: the absolute value, at the currency's exponent. It fails when
// the amount has a fraction the currency cannot carry (a JPY amount of
// "100.50"), which means the column was misread.
func AmountOf(v int64, scale int, currency string) (string, int64, error) {
	if v < 0 {
		v = -v
	}
	exp := Exponent(currency)
	for s := scale; s > exp; s-- {
		if v%10 != 0 {
			return "", 0, errAmount
		}
		v /= 10
	}
	for s := scale; s < exp; s++ {
		v *= 10
	}
	return FormatFixed(v, exp), v, nil
}
