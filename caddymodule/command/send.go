package command

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/signer"
)

// `idempotency send` signs and sends one test notification the way each
// platform does, like the Stripe CLI's trigger, so a route can be tried
// locally end to end. The signers are internal/signer's, the same the
// gateway's own tests sign with (through internal/platformtest).

func sendCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "send --platform <name> --url <url> [--id <id>] [--dir <dir>] [flags]",
		Short: "Signs and sends a test notification as a payment platform does",
		Long: `
Builds one notification as the platform sends it (body, headers, signature,
timestamp, nonce), signs it with test keys, posts it to --url and prints
the answer. Run it twice with the same --id to see the second copy
replayed: every run re-signs, as the platform's retries are, and sends the
same body where the platform's retries do.

  alipay             form POST signed RSA2 (SHA256withRSA), trade_status_sync
  wechatpay          API v3: Wechatpay-Signature (SHA256withRSA) headers and
                     a resource encrypted with the APIv3 key (AES-256-GCM)
  wechatpay_v2       XML signed with the API key (MD5, or --sign-type HMAC-SHA256)
  stripe             Stripe-Signature (HMAC-SHA256), payment_intent.succeeded
  paypal             PAYPAL-TRANSMISSION-* headers (SHA256withRSA), a
                     PAYMENT.CAPTURE.COMPLETED event
  standard_webhooks  webhook-id, webhook-timestamp, webhook-signature

The keys come from the files ` + "`idemgate idempotency keygen`" + ` writes to --dir (default
` + defaultKeyDir + `); --secret, --key, --key-id and --webhook-id override them.
Exit status 1 when the answer is not 2xx.
`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			var o sendOptions
			fl := cmd.Flags()
			o.platform, _ = fl.GetString("platform")
			o.url, _ = fl.GetString("url")
			o.id, _ = fl.GetString("id")
			o.order, _ = fl.GetString("order")
			o.amount, _ = fl.GetInt("amount")
			o.dir, _ = fl.GetString("dir")
			o.secret, _ = fl.GetString("secret")
			o.keyFile, _ = fl.GetString("key")
			o.keyID, _ = fl.GetString("key-id")
			o.webhookID, _ = fl.GetString("webhook-id")
			o.signType, _ = fl.GetString("sign-type")
			o.timeout, _ = fl.GetDuration("timeout")
			return runSend(cmd.OutOrStdout(), o)
		},
	}
	fl := c.Flags()
	fl.String("platform", "", "The preset: "+strings.Join(sendPlatforms, ", "))
	fl.String("url", "", "The route to send to, e.g. http://localhost:8084/webhooks/stripe")
	fl.String("id", "", "The notification's id (event id, trade_no, transaction_id); default: a new one. The same id is the same notification")
	fl.String("order", "", "The order id (out_trade_no); default: o-<id>")
	fl.Int("amount", 990, "The amount in cents / fen")
	fl.String("dir", defaultKeyDir, "Where keygen wrote the test keys")
	fl.String("secret", "", "The signing secret / API key, instead of the file in --dir")
	fl.String("key", "", "The PEM private key to sign with, instead of the file in --dir")
	fl.String("key-id", "", "WeChat Pay: the Wechatpay-Serial (public key id), instead of the file in --dir")
	fl.String("webhook-id", "", "PayPal: the webhook id, instead of the file in --dir")
	fl.String("sign-type", "MD5", "WeChat Pay v2: MD5 or HMAC-SHA256")
	fl.Duration("timeout", 30*time.Second, "Time limit for the request")
	c.MarkFlagRequired("platform")
	c.MarkFlagRequired("url")
	return c
}

type sendOptions struct {
	platform, url, id, order string
	amount                   int
	dir                      string
	secret, keyFile, keyID   string
	webhookID, signType      string
	timeout                  time.Duration
}

// notification is one signed delivery.
type notification struct {
	header http.Header
	body   []byte
}

// maxSendAnswer bounds the answer send prints.
const maxSendAnswer = 64 << 10

func runSend(w io.Writer, o sendOptions) error {
	if !slices.Contains(sendPlatforms, o.platform) {
		return fmt.Errorf("--platform must be one of %s, not %q", strings.Join(sendPlatforms, ", "), o.platform)
	}
	if o.id == "" {
		o.id = newNotificationID(o.platform)
	}
	if o.order == "" {
		o.order = "o-" + o.id
	}
	n, err := buildNotification(o)
	if err != nil {
		return fmt.Errorf("%s: %v", o.platform, err)
	}
	req, err := http.NewRequest(http.MethodPost, o.url, bytes.NewReader(n.body))
	if err != nil {
		return err
	}
	req.Header = n.header
	client := &http.Client{Timeout: o.timeout}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSendAnswer))
	if err != nil {
		return fmt.Errorf("reading the answer: %v", err)
	}
	replayed := ""
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		replayed = "  Idempotent-Replayed: true"
	}
	fmt.Fprintf(w, "%s %s notification %s (order %s) → %s\n%s %s%s\n%s",
		http.MethodPost, o.platform, o.id, o.order, o.url, resp.Proto, resp.Status, replayed, body)
	if len(body) > 0 && !bytes.HasSuffix(body, []byte("\n")) {
		fmt.Fprintln(w)
	}
	switch {
	case resp.StatusCode/100 == 2:
		fmt.Fprintf(w, "(send it again: --id %s)\n", o.id)
	case resp.StatusCode == http.StatusUnauthorized:
		// Sending it again would be refused the same way.
		fmt.Fprintf(w, "(the route refused the signature: does it verify with the keys in %s?)\n", o.dir)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the route answered %s", resp.Status)
	}
	return nil
}

// newNotificationID is a fresh id shaped like the platform's.
func newNotificationID(platform string) string {
	switch platform {
	case "alipay", "wechatpay", "wechatpay_v2":
		// trade_no / transaction_id: digits.
		return time.Now().Format("20060102") + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
	case "stripe":
		return "evt_test_" + signer.Nonce(20)
	case "paypal":
		return "WH-TEST-" + signer.Nonce(17)
	}
	return "msg_" + signer.Nonce(24)
}

// sendEventTime is the event time written in a body: fixed, so a
// notification sent again with the same --id has the same body.
var sendEventTime = time.Date(2026, 3, 14, 9, 26, 50, 0, time.UTC)

// idNonce is a nonce of n characters derived from the notification's id:
// the same on every send of one --id.
func idNonce(id string, n int) string {
	sum := sha256.Sum256([]byte("idemgate send " + id))
	return hex.EncodeToString(sum[:])[:n]
}

// buildNotification signs one notification of o.platform now. Where the
// platform's retries carry the same body (Stripe, PayPal, Standard
// Webhooks, WeChat Pay v3 and v2), the body depends on the id, order and
// amount only, and only the signature headers are fresh; Alipay re-signs
// each retry with a new notify_time, and so does send.
func buildNotification(o sendOptions) (notification, error) {
	var n notification
	var err error
	now := time.Now()
	switch o.platform {
	case "alipay":
		var k *rsa.PrivateKey
		if k, err = o.privateKey(fileAlipayPrivate); err != nil {
			return n, err
		}
		params := signer.AlipayNotify("2021000000000001", o.order, o.id, "TRADE_SUCCESS", cents(o.amount))
		var body string
		if body, err = (signer.Alipay{Key: k}).Body(params); err != nil {
			return n, err
		}
		n.body = []byte(body)
		n.header = http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}
	case "wechatpay":
		wp := signer.WechatPay{}
		if wp.Key, err = o.privateKey(fileWechatPrivate); err != nil {
			return n, err
		}
		if wp.Serial, err = o.value(o.keyID, fileWechatPublicID, "--key-id"); err != nil {
			return n, err
		}
		if wp.APIv3Key, err = o.value(o.secret, fileWechatAPIv3, "--secret"); err != nil {
			return n, err
		}
		n.body, n.header, err = wp.Notification(signer.WechatPayEvent{
			ID:         o.id,
			EventType:  "TRANSACTION.SUCCESS",
			Resource:   signer.WechatPayTransaction(o.id, o.order, "SUCCESS", o.amount),
			Nonce:      idNonce(o.id, 12),
			CreateTime: sendEventTime,
		})
	case "wechatpay_v2":
		if o.signType != "MD5" && o.signType != "HMAC-SHA256" {
			return n, fmt.Errorf("--sign-type must be MD5 or HMAC-SHA256, not %q", o.signType)
		}
		v2 := signer.WechatPayV2{SignType: o.signType}
		if v2.APIKey, err = o.value(o.secret, fileWechatV2, "--secret"); err != nil {
			return n, err
		}
		fields := signer.WechatPayV2Payment(o.id, o.order, o.amount)
		fields["nonce_str"] = idNonce(o.id, 32)
		fields["time_end"] = sendEventTime.Format("20060102150405")
		n.body = v2.Body(fields)
		n.header = http.Header{"Content-Type": {"text/xml"}}
	case "stripe":
		var secret string
		if secret, err = o.value(o.secret, fileStripe, "--secret"); err != nil {
			return n, err
		}
		n.body = signer.StripeEventAt(o.id, "payment_intent.succeeded", "pi_"+o.order, o.amount, sendEventTime)
		n.header = signer.StripeHeader(n.body, secret, now)
	case "paypal":
		p := signer.PayPal{}
		if p.Key, err = o.privateKey(filePayPalPrivate); err != nil {
			return n, err
		}
		if p.WebhookID, err = o.value(o.webhookID, filePayPalWebhook, "--webhook-id"); err != nil {
			return n, err
		}
		n.body = signer.PayPalEvent(o.id, "PAYMENT.CAPTURE.COMPLETED", o.order, cents(o.amount))
		n.header, err = p.Header(n.body, now)
	case "standard_webhooks":
		var secret string
		if secret, err = o.value(o.secret, fileStdWebhooks, "--secret"); err != nil {
			return n, err
		}
		n.body = fmt.Appendf(nil, `{"type":"payment.succeeded","timestamp":%q,"data":{"order_id":%q,"amount":%d}}`,
			sendEventTime.Format(time.RFC3339), o.order, o.amount)
		n.header, err = signer.StandardWebhooksHeader(secret, o.id, now, n.body)
	}
	if err != nil {
		return n, errors.New(strings.TrimPrefix(err.Error(), "signer: "))
	}
	return n, nil
}

// cents renders an amount in cents as "9.90".
func cents(n int) string { return fmt.Sprintf("%d.%02d", n/100, n%100) }

// value is flag if set, else the content of file in o.dir.
func (o sendOptions) value(flag, file, flagName string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	p := filepath.Join(o.dir, file)
	data, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("%v (run `idemgate idempotency keygen --platform %s --dir %s`, or pass %s)", err, o.platform, o.dir, flagName)
	}
	return strings.TrimSpace(string(data)), nil
}

// privateKey reads the RSA private key of --key, else file in o.dir.
func (o sendOptions) privateKey(file string) (*rsa.PrivateKey, error) {
	p := o.keyFile
	if p == "" {
		p = filepath.Join(o.dir, file)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%v (run `idemgate idempotency keygen --platform %s --dir %s`, or pass --key)", err, o.platform, o.dir)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", p)
	}
	var k any
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", p, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an RSA private key", p)
	}
	return rk, nil
}
