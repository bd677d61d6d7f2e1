package alipay

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/keying/bill"
)

// sellerMerchant tells which app_id an Alipay bill is for, whose head
// names the seller account only (bill.Traits.SellerMerchant): merchant=
// when given (checked against the seller its notifications name), else
// the one app whose recorded notifications name the bill's seller, else
// the route's one pinned app_id, else the one app_id recorded. Ambiguous:
// the caller must say. A bill of a seller none of the scope's
// notifications name, when some name one, is refused.
func sellerMerchant(s bill.Sellers) (bill.Seller, error) {
	account, rec := s.Account, s.Recorded
	var forAccount, sellers []string
	for m, accts := range rec {
		for a := range accts {
			sellers = append(sellers, a)
			if a == account {
				forAccount = append(forAccount, m)
			}
		}
	}
	slices.Sort(forAccount)
	slices.Sort(sellers)
	sellers = slices.Compact(sellers)
	if account != "" && len(sellers) > 0 && len(forAccount) == 0 {
		return bill.Seller{}, fmt.Errorf("this Alipay bill is seller account %s's (#账号), and the notifications scope %s recorded name seller account %s: "+
			"not reconciled against another seller's orders (the wrong bill, or another scope: scope=…)", account, s.Scope, strings.Join(sellers, ", "))
	}
	if m := s.Merchant; m != "" {
		if accts := rec[m]; account != "" && len(accts) > 0 && !accts[account] {
			return bill.Seller{}, fmt.Errorf("this Alipay bill is seller account %s's (#账号), and app_id %s's notifications name seller account %s: not reconciled",
				account, m, strings.Join(slices.Sorted(maps.Keys(accts)), ", "))
		}
		return bill.Seller{}, nil
	}
	cands, how := forAccount, "the app_id whose notifications name the bill's seller account "+account
	if pinned := intersect(forAccount, s.Pins); len(pinned) > 0 {
		cands = pinned
	}
	if len(cands) == 0 && len(s.Pins) > 0 {
		cands, how = s.Pins, "the app_id the route pins"
	}
	if len(cands) == 0 {
		cands, how = slices.Sorted(maps.Keys(rec)), "the app_id of the notifications recorded"
	}
	switch len(cands) {
	case 1:
		return bill.Seller{Merchant: cands[0], Note: fmt.Sprintf("app_id %s: %s", cands[0], how)}, nil
	case 0:
		return bill.Seller{Untold: fmt.Errorf("an Alipay bill names the seller account (%s), not the app_id of the keys, and scope %s neither pins an app_id nor has recorded a notification or kept an order of its rows to tell it from: say which with merchant=<app_id>",
			orNone(account), s.Scope)}, nil
	}
	return bill.Seller{}, fmt.Errorf("an Alipay bill names the seller account (%s), not the app_id of the keys, and scope %s has several (%s: %s): say which with merchant=<app_id>",
		orNone(account), s.Scope, how, strings.Join(cands, ", "))
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none in its head"
	}
	return s
}
