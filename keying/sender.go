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
	// Sign builds one notification of in, signed at in.Now.
	Sign func(in SendInput) (body []byte, header http.Header, err error)
}

// KeyFile is one file keygen writes.
type KeyFile struct {
	Name string
	Data []byte
}

// SendInput is one test notification to build, and where its keys are.
type SendInput struct {
	// ID is the notification's id (event id, trade_no, transaction_id),
	// Order its order id, Amount in minor units.
	ID, Order string
	Amount    int
	// SignType is WeChat Pay v2's MD5 or HMAC-SHA256.
	SignType string
	// Secret, KeyID and WebhookID are the --secret, --key-id and
	// --webhook-id flags ("" when not given).
	Secret, KeyID, WebhookID string
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

// SendEventTime is the event time written in a test body: fixed, so a
// notification sent again with the same id has the same body.
var SendEventTime = time.Date(2026, 3, 14, 9, 26, 50, 0, time.UTC)

// Nonce is a nonce of n hex digits derived from in's id: the same on
// every send of one id.
func (in SendInput) Nonce(n int) string {
	sum := sha256.Sum256([]byte("idemgate send " + in.ID))
	return hex.EncodeToString(sum[:])[:n]
}

// Major renders in's amount in cents as "9.90".
func (in SendInput) Major() string { return fmt.Sprintf("%d.%02d", in.Amount/100, in.Amount%100) }
