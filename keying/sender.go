package keying

import (
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// Sender signs test notifications as its platform does, for the CLI's
// `send` and `keygen`: product code the binary links, with throw-away
// keys that stand in for the platform's own.
type Sender struct {
	// Summary is what `send --help` says the platform's notification is;
	// further lines are indented under the first.
	Summary string
	// Keygen makes the platform's test keys and secrets, the files a
	// local route names and the private keys Sign reads.
	Keygen func() ([]KeyFile, error)
	// Files names what Keygen writes, for `keygen --help`.
	Files []string
	// NewID is a fresh notification id shaped like the platform's.
	NewID func() string
	// Events are the business events Sign makes, the first the default:
	// what `send --event` takes, like the Stripe CLI's `trigger <event>`.
	Events []SendEvent
	// RefundEvent is the event that refunds the default one's order.
	RefundEvent string
	// TradeID: the id is the trade's (Alipay trade_no, WeChat Pay
	// transaction_id), which every event of one order carries, so a refund
	// of an order is sent with its payment's --id; elsewhere each event
	// has an id of its own and --order names the order.
	TradeID bool
	// Flags are the platform's own flags of send, beside the ones every
	// platform takes; SendInput.Flags holds their values.
	Flags []SendFlag
	// Sign builds one notification of in, signed at in.Now.
	Sign func(in SendInput) (Signed, error)
}

// SendEvent is one business event a Sender signs.
type SendEvent struct {
	// Name is what --event takes.
	Name string
	// About says what the platform sends, for the list of events.
	About string
}

// SendFlag is a flag of send that one platform's signer takes (a key id
// in place of keygen's file, a signature type, a service provider's
// merchants).
type SendFlag struct {
	// Name is the flag's name without the dashes, Default its value when
	// not given, Usage its line in `send --help`.
	Name, Default, Usage string
	// Key: it overrides a file of keygen's, so a refused signature's hint
	// names it when given.
	Key bool
	// Order: it says whose order the notification is, so the lines send
	// prints to send it again and to refund the order repeat it, and a
	// platform whose signer does not take it refuses it.
	Order bool
}

// Flag is the sender's flag named name, false when it has none.
func (s *Sender) Flag(name string) (SendFlag, bool) {
	for _, f := range s.Flags {
		if f.Name == name {
			return f, true
		}
	}
	return SendFlag{}, false
}

// Event is the sender's event named name, false when it has none.
func (s *Sender) Event(name string) (SendEvent, bool) {
	for _, e := range s.Events {
		if e.Name == name {
			return e, true
		}
	}
	return SendEvent{}, false
}

// Signed is one signed notification as the platform delivers it.
type Signed struct {
	// Method is GET for a signed query (Alipay's browser return), else
	// POST ("").
	Method string
	// Query is a GET's signed query.
	Query  string
	Body   []byte
	Header http.Header
}

// KeyFile is one file keygen writes.
type KeyFile struct {
	Name string
	Data []byte
}

// SendInput is one test notification to build, and where its keys are.
type SendInput struct {
	// Event is one of the Sender's Events.
	Event string
	// ID is the notification's id (event id, trade_no, transaction_id),
	// Order its order id, Amount in minor units.
	ID, Order string
	Amount    int
	// Refund is a refund's id (out_biz_no, out_refund_no, Stripe's re_…,
	// PayPal's refund id), RefundAmount its own amount in minor units;
	// RefundedBefore what the order's earlier refunds refunded, for the
	// platforms whose refund notification carries the running total
	// (Alipay's refund_fee, Stripe's charge.refunded amount_refunded).
	Refund         string
	RefundAmount   int
	RefundedBefore int
	// Secret is the --secret flag ("" when not given).
	Secret string
	// Flags are the values of the Sender's own Flags by name, their
	// Default when not given.
	Flags map[string]string
	// Now is the signing time.
	Now time.Time
	// Value is flag when set, else the content of file in the key
	// directory; flagName names the flag in the error that says how to
	// make the file.
	Value func(flag, file, flagName string) (string, error)
	// PrivateKey reads the RSA private key of --key, else file in the key
	// directory.
	PrivateKey func(file string) (*rsa.PrivateKey, error)
}

// Flag is the value of the sender's flag named name ("" when unset).
func (in SendInput) Flag(name string) string { return in.Flags[name] }

// SendEventTime is the event time written in a test body: fixed, so a
// notification sent again with the same id has the same body.
var SendEventTime = time.Date(2026, 3, 14, 9, 26, 50, 0, time.UTC)

// Nonce is a nonce of n hex digits derived from in's id, event and
// refund: the same on every send of one notification, another for each
// event of one id.
func (in SendInput) Nonce(n int) string {
	sum := sha256.Sum256([]byte("idemgate send " + in.ID + "\x00" + in.Event + "\x00" + in.Refund))
	return hex.EncodeToString(sum[:])[:n]
}

// Major renders in's amount in cents as "9.90".
func (in SendInput) Major() string { return MinorToMajor(in.Amount) }

// RefundMajor renders in's refund amount in cents as "9.90".
func (in SendInput) RefundMajor() string { return MinorToMajor(in.RefundAmount) }

// RefundedMajor renders what the order's refunds add up to with this one
// (RefundedBefore + RefundAmount) as "9.90".
func (in SendInput) RefundedMajor() string { return MinorToMajor(in.RefundedBefore + in.RefundAmount) }

// MinorToMajor renders cents as "9.90".
func MinorToMajor(cents int) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }
