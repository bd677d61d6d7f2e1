package command

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
)

// `idempotency send` signs and sends one test notification the way each
// platform does, like the Stripe CLI's trigger, so a route can be tried
// locally end to end. Each platform's test signer is its preset's Sender
// (platforms/<name>/send.go), built on internal/signer, the signing code
// the gateway's own tests sign with (through internal/platformtest).

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

` + presetTable(func(p *keying.Preset) string { return p.Sender.Summary }) + `

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
		o.id = platforms.Lookup(o.platform).Sender.NewID()
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
		fmt.Fprintf(w, "(the route refused the signature: %s)\n", o.signedWith())
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the route answered %s", resp.Status)
	}
	return nil
}

// signedWith is the question a refused signature raises: whether the
// route verifies with what the user signed with, named as they gave it.
// Keygen's directory is named only when its keys were used: a user who
// passed --secret whsec_… has nothing to check there.
func (o sendOptions) signedWith() string {
	var flags []string
	for _, f := range []struct{ name, v string }{{"--secret", o.secret}, {"--key", o.keyFile}, {"--key-id", o.keyID}, {"--webhook-id", o.webhookID}} {
		if f.v != "" {
			flags = append(flags, f.name)
		}
	}
	if len(flags) == 0 {
		return "does it verify with the keys in " + o.dir + "?"
	}
	return "does the route's configuration match the " + strings.Join(flags, " and ") + " you passed?"
}

// buildNotification signs one notification of o.platform now with the
// platform's test signer. Where the platform's retries carry the same body
// (Stripe, PayPal, Standard Webhooks, WeChat Pay v3 and v2), the body
// depends on the id, order and amount only, and only the signature headers
// are fresh; Alipay re-signs each retry with a new notify_time, and so
// does send.
func buildNotification(o sendOptions) (notification, error) {
	in := keying.SendInput{ID: o.id, Order: o.order, Amount: o.amount, SignType: o.signType,
		Secret: o.secret, KeyID: o.keyID, WebhookID: o.webhookID, Now: time.Now(),
		Value: o.value, PrivateKey: o.privateKey}
	body, header, err := platforms.Lookup(o.platform).Sender.Sign(in)
	if err != nil {
		return notification{}, errors.New(strings.TrimPrefix(err.Error(), "signer: "))
	}
	return notification{header: header, body: body}, nil
}

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
