// Package standardwebhooks is the Standard Webhooks preset: the
// webhook-signature HMAC over id, timestamp and body, each message id its
// own event, re-signed on redelivery.
package standardwebhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/signer"
	"github.com/idemgate/idemgate/keying"
)

// Preset is the Standard Webhooks specification's:
// answered 200, each message its own, re-signed with the secret on
// redelivery.
var Preset = &keying.Preset{
	Name: "standard_webhooks", Title: "The sender",
	Ack: keying.Ack{Status: 200},
	// Standard Webhooks, "Retry schedule" (github.com/standard-webhooks/
	// standard-webhooks, spec/standard-webhooks.md, Svix's schedule): the
	// first attempt immediately, then after 5 seconds, 5 minutes, 30
	// minutes, 2 hours, 5 hours, 10 hours and 10 hours.
	Schedule:  keying.Schedule{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour},
	OwnEvents: true,
}

// resigner signs a redelivered copy afresh with the sender's secret.
func resigner(secret string) keying.Resigner {
	return func(hdr http.Header, body []byte, at time.Time) error {
		sh, err := signer.StandardWebhooksHeader(secret, hdr.Get("Webhook-Id"), at, body)
		if err != nil {
			return err
		}
		hdr.Set("Webhook-Timestamp", sh.Get("Webhook-Timestamp"))
		hdr.Set("Webhook-Signature", sh.Get("Webhook-Signature"))
		return nil
	}
}

// StandardWebhooks verifies webhooks signed by the Standard Webhooks
// specification.
//
// Signature: webhook-signature is a space-separated list of "v1,<base64>";
// each is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" keyed
// by the base64-decoded secret after its whsec_ prefix (padded or not, as
// the reference libraries accept it), and any may match.
// Other versions (v1a, asymmetric) are ignored. webhook-timestamp must be
// within the tolerance (±5 min by default).
//
// Key: the webhook-id header as it is (it is signed). Fingerprint: the body
// digest. Success: 2xx. No Extra.
type StandardWebhooks struct {
	key      []byte
	noVerify bool
	tol      time.Duration
}

// Config is what a route configures the Standard Webhooks check with.
type Config struct {
	// Secret is the signing secret (whsec_<base64>).
	Secret string
	// NoVerify runs the check without signatures (`verify off`).
	NoVerify bool
	// Tolerance for webhook-timestamp; 0 means keying.DefaultTolerance.
	Tolerance time.Duration
}

// New returns the Standard Webhooks check configured with cfg. Errors
// read "standard_webhooks: <what>" and wrap keying.ErrNeedsSecret when
// the secret is missing.
func New(cfg Config) (keying.Platform, error) {
	s := &StandardWebhooks{noVerify: cfg.NoVerify, tol: keying.TimeTolerance(cfg.Tolerance)}
	if cfg.Secret == "" {
		if cfg.NoVerify {
			return s, nil
		}
		return nil, keying.NeedsSecret("standard_webhooks", "secret (whsec_…)")
	}
	key, err := decodeSecret(strings.TrimPrefix(strings.TrimSpace(cfg.Secret), "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("standard_webhooks: the secret must be whsec_ followed by base64")
	}
	s.key = key
	return s, nil
}

// decodeSecret reads standard base64 with or without its "=" padding.
func decodeSecret(s string) ([]byte, error) {
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (*StandardWebhooks) Name() string { return "standard_webhooks" }

// maxStandardSignatures bounds the signatures checked in one header.
const maxStandardSignatures = 8

// maxWebhookIDLen bounds the webhook-id that becomes the key.
const maxWebhookIDLen = 256

func (s *StandardWebhooks) Verify(r *keying.Request) (*keying.Notification, error) {
	const p = "standard_webhooks"
	id := strings.TrimSpace(r.Header.Get("webhook-id"))
	if !s.noVerify {
		if err := s.verify(r, id); err != nil {
			return nil, err
		}
	}
	if id == "" {
		return nil, keying.Malformed(p, "no webhook-id header")
	}
	if len(id) > maxWebhookIDLen {
		return nil, keying.Malformed(p, "webhook-id longer than %d bytes", maxWebhookIDLen)
	}
	return &keying.Notification{Fields: keying.NewFields(r), Key: id, Fingerprint: keying.Digest(r.Body)}, nil
}

func (s *StandardWebhooks) verify(r *keying.Request, id string) error {
	const p = "standard_webhooks"
	if id == "" {
		return keying.SigErr(p, "missing webhook-id header")
	}
	ts, err := keying.SignatureHeader(p, r, "webhook-timestamp")
	if err != nil {
		return err
	}
	sigHeader, err := keying.SignatureHeader(p, r, "webhook-signature")
	if err != nil {
		return err
	}
	if _, err := keying.UnixTimestamp(p, "webhook-timestamp", ts, r.Now, s.tol, false); err != nil {
		return err
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(r.Body)
	want := mac.Sum(nil)
	n := 0
	for _, item := range strings.Fields(sigHeader) {
		version, sigB64, ok := strings.Cut(item, ",")
		if !ok || version != "v1" {
			continue
		}
		if n++; n > maxStandardSignatures {
			return keying.SigErr(p, "webhook-signature has too many signatures")
		}
		sig, err := base64.StdEncoding.DecodeString(sigB64)
		if err != nil {
			continue
		}
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return keying.SigErr(p, "no v1 signature matches")
}

// Success: any 2xx.
func (*StandardWebhooks) Success(status int, _ http.Header, _ []byte) bool {
	return keying.Is2xx(status)
}

// RetryWindow: senders choose their own schedule (Svix's ends after about
// 28h: 5s, 5m, 30m, 2h, 5h, 10h, 10h); 3 days leaves room for slower ones
// and manual resends.
func (*StandardWebhooks) RetryWindow() time.Duration { return 72 * time.Hour }
