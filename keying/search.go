package keying

import (
	"context"
	"slices"
)

// Limits of what one notification files for search: a merchant's
// reference is an order or refund number (Alipay's out_trade_no is at
// most 64 characters, WeChat Pay's 32), never a body.
const (
	maxMerchantRefs   = 8
	maxMerchantRefLen = 128
)

// SearchRefs returns the distinct refs fit to search by, in order: empty
// ones, ones longer than 128 bytes or holding control characters (no
// order number has them, and an index entry must not be cut in two by
// one) are left out, and at most 8 are kept. Nil when none is left.
func SearchRefs(refs ...string) []string {
	var out []string
	for _, r := range refs {
		if len(out) == maxMerchantRefs {
			break
		}
		if r == "" || len(r) > maxMerchantRefLen || hasControl(r) || slices.Contains(out, r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// SearchRefsAt is SearchRefs of the strings at paths of f's JSON body;
// a path that is missing, an object or an array is left out.
func SearchRefsAt(f *Fields, paths ...string) []string {
	vals := make([]string, 0, len(paths))
	for _, p := range paths {
		if v, ok, err := f.JSON(p); err == nil && ok && v != "" && v[0] != '{' && v[0] != '[' {
			vals = append(vals, v)
		}
	}
	return SearchRefs(vals...)
}

// Context is the context of the request f reads: a caller that holds
// only a Notification reaches the request's values through it.
func (f *Fields) Context() context.Context { return f.r.Ctx() }
