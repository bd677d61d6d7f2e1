package reconcile

import (
	"errors"
	"math/big"
	"strings"

	"github.com/idemgate/idemgate/keying"
)

// Exact decimal money for reconciliation: amounts are compared and added
// as integers of their smallest written unit, never as floats. A bill
// writes "12.30", a notification "12.3" or "1230" fen turned into "12.30":
// both are the same amount.

// decimal is an amount as an integer and the number of its decimals.
type decimal struct {
	v     *big.Int
	scale int
}

var errNotDecimal = errors.New("not a decimal amount")

// parseDecimal reads a plain decimal: digits, at most one ".", an
// optional leading "-".
func parseDecimal(s string) (decimal, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.Trim(whole+frac, "0123456789") != "" || len(frac) > 18 {
		return decimal{}, errNotDecimal
	}
	v, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return decimal{}, errNotDecimal
	}
	if neg {
		v.Neg(v)
	}
	return decimal{v: v, scale: len(frac)}, nil
}

// rescaled is d's value with scale decimals (scale ≥ d.scale).
func (d decimal) rescaled(scale int) *big.Int {
	if scale == d.scale {
		return d.v
	}
	return new(big.Int).Mul(d.v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-d.scale)), nil))
}

// cmpDecimal compares two amounts as numbers; ok is false when either is
// not a decimal.
func cmpDecimal(a, b string) (c int, ok bool) {
	x, err1 := parseDecimal(a)
	y, err2 := parseDecimal(b)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	s := max(x.scale, y.scale)
	return x.rescaled(s).Cmp(y.rescaled(s)), true
}

// subDecimal is a − b, written with the larger of their scales.
func subDecimal(a, b string) (string, bool) {
	x, err1 := parseDecimal(a)
	y, err2 := parseDecimal(b)
	if err1 != nil || err2 != nil {
		return "", false
	}
	s := max(x.scale, y.scale)
	return formatDecimal(decimal{v: new(big.Int).Sub(x.rescaled(s), y.rescaled(s)), scale: s}), true
}

func formatDecimal(d decimal) string {
	return keying.Decimal(new(big.Int).Abs(d.v).String(), d.scale, d.v.Sign() < 0)
}

// totals adds amounts per currency.
type totals map[string]decimal

// add adds amount in currency; an amount that is not a decimal (none
// named) adds nothing.
func (t totals) add(currency, amount string) {
	d, err := parseDecimal(amount)
	if err != nil {
		return
	}
	cur, ok := t[currency]
	if !ok {
		t[currency] = decimal{v: new(big.Int).Set(d.v), scale: d.scale}
		return
	}
	s := max(cur.scale, d.scale)
	t[currency] = decimal{v: new(big.Int).Add(cur.rescaled(s), d.rescaled(s)), scale: s}
}

// view is t as the report writes it: currency → decimal string.
func (t totals) view() map[string]string {
	out := make(map[string]string, len(t))
	for c, d := range t {
		if c == "" {
			c = "unknown"
		}
		out[c] = formatDecimal(d)
	}
	return out
}
