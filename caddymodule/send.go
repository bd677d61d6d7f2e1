package caddymodule

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/platformtest"
)

// `idempotency send` signs and sends one test notification the way each
// platform does, like the Stripe CLI's trigger, so a route can be tried
// locally end to end. The signers are internal/platformtest's, the same
// the gateway's own tests use; they take a testing.TB, which cliT adapts.

// cliT is the testing.TB the platformtest signers get in the CLI: a Fatal
// inside a signer becomes an error (see signing). Only the methods the
// signers call are implemented; the embedded nil TB is never reached.
type cliT struct{ testing.TB }

type signFailure struct{ msg string }

func (cliT) Helper()                         {}
func (cliT) Fatal(args ...any)               { panic(signFailure{fmt.Sprint(args...)}) }
func (cliT) Fatalf(format string, a ...any)  { panic(signFailure{fmt.Sprintf(format, a...)}) }
func (cliT) Errorf(format string, a ...any)  { panic(signFailure{fmt.Sprintf(format, a...)}) }
func (cliT) Error(args ...any)               { panic(signFailure{fmt.Sprint(args...)}) }
func (cliT) Logf(format string, args ...any) {}

// signing runs fn, turning a signer's Fatal into an error.
func signing(fn func(t *cliT)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(signFailure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s", strings.TrimPrefix(f.msg, "platformtest: "))
		}
	}()
	fn(&cliT{})
	return nil
}

func sendCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "send --platform <name> --url <url> [--id <id>] [--dir <dir>] [flags]",
		Short: "Signs and sends a test notification as a payment platform does",
		Long: `
Builds one notification as the platform sends it (body, headers, signature,
timestamp, nonce), signs it with test keys, posts it to --url and prints
the answer. Run it twice with the same --id to see the second copy
replayed: every run re-signs, as the platform's retries are.

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
	fmt.Fprintf(w, "(send it again: --id %s)\n", o.id)
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
		return "evt_test_" + platformtest.Nonce(20)
	case "paypal":
		return "WH-TEST-" + platformtest.Nonce(17)
	}
	return "msg_" + platformtest.Nonce(24)
}

// buildNotification signs one notification of o.platform now.
func buildNotification(o sendOptions) (notification, error) {
	var n notification
	err := signing(func(t *cliT) {
		now := time.Now()
		switch o.platform {
		case "alipay":
			a := platformtest.Alipay{Key: o.privateKey(t, fileAlipayPrivate)}
			params := platformtest.AlipayNotify("2021000000000001", o.order, o.id, "TRADE_SUCCESS", cents(o.amount))
			n.body = []byte(a.Body(t, params))
			n.header = http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}
		case "wechatpay":
			wp := platformtest.WechatPay{
				Key:      o.privateKey(t, fileWechatPrivate),
				Serial:   o.value(t, o.keyID, fileWechatPublicID, "--key-id"),
				APIv3Key: o.value(t, o.secret, fileWechatAPIv3, "--secret"),
			}
			n.body, n.header = wp.Notification(t, platformtest.WechatPayEvent{
				ID:        o.id,
				EventType: "TRANSACTION.SUCCESS",
				Resource:  platformtest.WechatPayTransaction(o.id, o.order, "SUCCESS", o.amount),
			})
		case "wechatpay_v2":
			if o.signType != "MD5" && o.signType != "HMAC-SHA256" {
				t.Fatalf("--sign-type must be MD5 or HMAC-SHA256, not %q", o.signType)
			}
			v2 := platformtest.WechatPayV2{APIKey: o.value(t, o.secret, fileWechatV2, "--secret"), SignType: o.signType}
			n.body = v2.Body(platformtest.WechatPayV2Payment(o.id, o.order, o.amount))
			n.header = http.Header{"Content-Type": {"text/xml"}}
		case "stripe":
			n.body = platformtest.StripeEvent(o.id, "payment_intent.succeeded", "pi_"+o.order, o.amount)
			n.header = platformtest.StripeHeader(n.body, o.value(t, o.secret, fileStripe, "--secret"), now)
		case "paypal":
			p := platformtest.PayPal{Key: o.privateKey(t, filePayPalPrivate), WebhookID: o.value(t, o.webhookID, filePayPalWebhook, "--webhook-id")}
			n.body = platformtest.PayPalEvent(o.id, "PAYMENT.CAPTURE.COMPLETED", o.order, cents(o.amount))
			n.header = p.Header(t, n.body, now)
		case "standard_webhooks":
			n.body = fmt.Appendf(nil, `{"type":"payment.succeeded","timestamp":%q,"data":{"order_id":%q,"amount":%d}}`,
				now.UTC().Format(time.RFC3339), o.order, o.amount)
			n.header = platformtest.StandardWebhooksHeader(t, o.value(t, o.secret, fileStdWebhooks, "--secret"), o.id, now, n.body)
		}
	})
	return n, err
}

// cents renders an amount in cents as "9.90".
func cents(n int) string { return fmt.Sprintf("%d.%02d", n/100, n%100) }

// value is flag if set, else the content of file in o.dir.
func (o sendOptions) value(t *cliT, flag, file, flagName string) string {
	if flag != "" {
		return flag
	}
	p := filepath.Join(o.dir, file)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run `idemgate idempotency keygen --platform %s --dir %s`, or pass %s)", err, o.platform, o.dir, flagName)
	}
	return strings.TrimSpace(string(data))
}

// privateKey reads the RSA private key of --key, else file in o.dir.
func (o sendOptions) privateKey(t *cliT, file string) *rsa.PrivateKey {
	p := o.keyFile
	if p == "" {
		p = filepath.Join(o.dir, file)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run `idemgate idempotency keygen --platform %s --dir %s`, or pass --key)", err, o.platform, o.dir)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM block", p)
	}
	var k any
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		t.Fatalf("%s is not an RSA private key", p)
	}
	return rk
}
