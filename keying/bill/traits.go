package bill

import "time"

// Traits are a platform's quirks that reconciliation with its bill allows
// for. Each platform with a bill declares its own next to its layout
// (platforms/<name>/bill.go), and the registry (package platforms) pairs
// them with its preset: they live here, not on keying.Preset, so the gate,
// which imports keying, does not pull in the bill readers.
type Traits struct {
	// Format reads the platform's bill; nil for a platform without one,
	// which reconciliation refuses.
	Format *Format
	// Zone is the clock of the bill's days; nil means UTC.
	Zone *time.Location
	// NamesSeller: the bill names the seller account, not the app_id a
	// route pins (Alipay), so reconciliation must be told which merchant.
	NamesSeller bool
	// Account is the seller account a journaled notification's body
	// names, written as the bill's head names it (Alipay: seller_id +
	// "0156", the bill's #账号), or "": reconciliation tells from it which
	// app a bill is for, and refuses another seller's bill. Nil where the
	// bill names none.
	Account func(body []byte) string
	// SellerMerchant, for a bill that names the seller account only
	// (NamesSeller), tells which merchant of the keys the bill is for
	// from what the scope recorded (Alipay: which app_id); an error is a
	// refusal (the wrong seller's bill, or several merchants to choose
	// from). Nil where the bill names its merchants.
	SellerMerchant func(s Sellers) (Seller, error)
	// RefundIsTotal: a refund notification's amount is the trade's
	// refunded total so far (Alipay's refund_fee), not the refund's own.
	RefundIsTotal bool
	// EndsInclusive: a bill section's end is its last second, counted in
	// (PayPal's …08:59:59).
	EndsInclusive bool
	// RefundNote is said of a refund the backend ran that the bill does
	// not show, where the platform dates the two apart.
	RefundNote string
	// RefPaths are where a notification's JSON body names the objects the
	// bill names, for a platform whose keys are event ids: reconciliation
	// reads them from a journaled body to find the event a bill row is of.
	RefPaths []string
	// SubMerchant is the sub-merchant (特约商户号) a journaled
	// notification's body names, for a platform whose keys name the
	// route's one pinned merchant (WeChat Pay v2: a service provider's own
	// mch_id) rather than the sub-merchant a bill's row is of; nil where
	// keys name the row's merchant.
	SubMerchant func(body []byte) string
}

// Sellers is what reconciliation knows of the merchant a bill that names
// the seller account only is for.
type Sellers struct {
	// Account is the seller account the bill's head names ("" when none).
	Account string
	// Scope is the scope reconciled.
	Scope string
	// Merchant is the merchant the caller named (merchant=), "" for none.
	Merchant string
	// Pins are the merchants the scope's route pins.
	Pins []string
	// Recorded are the merchants the scope's records name, each with the
	// seller accounts their notifications name (Traits.Account).
	Recorded map[string]map[string]bool
}

// Seller is SellerMerchant's answer: the merchant told and a note saying
// how, for the report (both "" when the caller named it); or, when
// nothing recorded tells, Untold, the refusal to give unless the orders
// the bill's rows name tell the merchant.
type Seller struct {
	Merchant, Note string
	Untold         error
}
