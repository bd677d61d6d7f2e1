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
		Use:   "send --platform <name> --url <url> [--event <event>] [--id <id>] [--dir <dir>] [flags]",
		Short: "Signs and sends a test notification as a payment platform does",
		Long: `
Builds one notification of a business event as the platform sends it
(body, headers, signature, timestamp, nonce), signs it with test keys,
posts it to --url and prints the answer, like the Stripe CLI's trigger.
Run it twice with the same flags to see the second copy replayed: every
run re-signs, as the platform's retries are, and sends the same body
where the platform's retries do.

` + presetTable(func(s *keying.Sender) string { return s.Summary }) + `

--event picks the business event (default: the payment); --event with no
value, or one the platform does not send, lists the platform's events:

` + eventTable() + `

One order's events: a payment, then its refund. Alipay's and WeChat Pay's
notifications carry the trade's id (trade_no, transaction_id), so the
refund is sent with the payment's --id; Stripe's, PayPal's and Standard
Webhooks' events each have an id of their own, so the refund names the
payment's --order. send prints the line to use after each payment.
--refund names the refund (default: <order>-r1), --refund-amount its
own amount (default: --amount less --refunded-before, the rest of it).
Alipay's refund_fee and Stripe's charge.refunded amount_refunded are the
order's refunded total: send writes --refunded-before (what the order's
earlier refunds refunded; send keeps no record of what it sent, so the
default is 0, this refund being the first) plus --refund-amount there,
as the platform would. Refunds of 30.00, 20.00 and 10.00 of one order:
--refund-amount 3000, then --refund-amount 2000 --refunded-before 3000,
then --refund-amount 1000 --refunded-before 5000, each with its --refund.

A WeChat Pay service provider's (服务商) notifications: --sp-mchid and
--sub-mchid put both merchants in the resource instead of mchid (a
payment's sp_appid and sub_appid too); the order is the sub-merchant's.

The keys come from the files ` + "`idemgate idempotency keygen`" + ` writes to --dir (default
` + defaultKeyDir + `); --secret, --key, --key-id and --webhook-id override them.
Exit status 1 when the answer is not 2xx (for Alipay's browser return, a
GET, not 2xx or 3xx).
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
			o.event, _ = fl.GetString("event")
			o.eventGiven = fl.Changed("event")
			o.refund, _ = fl.GetString("refund")
			o.refundAmount, _ = fl.GetInt("refund-amount")
			o.refundedBefore, _ = fl.GetInt("refunded-before")
			o.dir, _ = fl.GetString("dir")
			o.secret, _ = fl.GetString("secret")
			o.keyFile, _ = fl.GetString("key")
			o.flags = map[string]string{}
			for _, f := range platformFlags() {
				o.flags[f.Name], _ = fl.GetString(f.Name)
				if fl.Changed(f.Name) {
					o.given = append(o.given, f.Name)
				}
			}
			o.timeout, _ = fl.GetDuration("timeout")
			return runSend(cmd.OutOrStdout(), o)
		},
	}
	fl := c.Flags()
	fl.String("platform", "", "The preset: "+strings.Join(sendPlatforms, ", "))
	fl.String("url", "", "The route to send to, e.g. http://localhost:8084/webhooks/stripe")
	fl.String("event", "", "The business event (default: the payment); with no value, or an unknown one, the list of the platform's events")
	fl.String("id", "", "The notification's id (event id; Alipay's trade_no, WeChat Pay's transaction_id, which an order's refund carries too); default: a new one. The same flags are the same notification")
	fl.String("order", "", "The order id (out_trade_no); default: o-<id>")
	fl.Int("amount", defaultAmount, "The order's amount in cents / fen")
	fl.String("refund", "", "A refund's id (out_biz_no, out_refund_no, re_<refund>); default: <order>-r1")
	fl.Int("refund-amount", 0, "A refund's own amount in cents / fen; default: --amount less --refunded-before")
	fl.Int("refunded-before", 0, "What the order's earlier refunds refunded, in cents / fen: Alipay's and Stripe's refund notification carries the total (default 0: send keeps no record of earlier sends)")
	fl.String("dir", defaultKeyDir, "Where keygen wrote the test keys")
	fl.String("secret", "", "The signing secret / API key, instead of the file in --dir")
	fl.String("key", "", "The PEM private key to sign with, instead of the file in --dir")
	for _, f := range platformFlags() {
		fl.String(f.Name, f.Default, f.Usage)
	}
	fl.Duration("timeout", 30*time.Second, "Time limit for the request")
	c.MarkFlagRequired("platform")
	c.MarkFlagRequired("url")
	c.SetFlagErrorFunc(eventFlagError)
	return c
}

// defaultAmount is --amount's default.
const defaultAmount = 990

type sendOptions struct {
	platform, url, id, order string
	amount                   int
	event                    string
	eventGiven               bool // --event was given, even empty
	refund                   string
	refundAmount             int
	refundedBefore           int
	orderGiven               bool
	dir                      string
	secret, keyFile          string
	// flags are the values of the platforms' own flags (keying.SendFlag)
	// by name, given the names of those given.
	flags   map[string]string
	given   []string
	timeout time.Duration
}

// platformFlags are the flags of send that the platforms' signers take,
// each once, in the order of the registry.
func platformFlags() []keying.SendFlag {
	var flags []keying.SendFlag
	for _, name := range sendPlatforms {
		for _, f := range platforms.SenderOf(name).Flags {
			if !slices.ContainsFunc(flags, func(g keying.SendFlag) bool { return g.Name == f.Name }) {
				flags = append(flags, f)
			}
		}
	}
	return flags
}

// flagOwners names the platforms whose signer takes the flag name.
func flagOwners(name string) []string {
	var owners []string
	for _, p := range sendPlatforms {
		if _, ok := platforms.SenderOf(p).Flag(name); ok {
			owners = append(owners, p)
		}
	}
	return owners
}

// notification is one signed delivery.
type notification struct {
	method string // GET or POST
	query  string // a GET's signed query
	header http.Header
	body   []byte
}

// maxSendAnswer bounds the answer send prints.
const maxSendAnswer = 64 << 10

func runSend(w io.Writer, o sendOptions) error {
	if !slices.Contains(sendPlatforms, o.platform) {
		return fmt.Errorf("--platform must be one of %s, not %q", strings.Join(sendPlatforms, ", "), o.platform)
	}
	sender := platforms.SenderOf(o.platform)
	for _, name := range o.given {
		if _, own := sender.Flag(name); own || o.flags[name] == "" {
			continue
		}
		// One that says whose order it is would be lost: refused.
		if owners := flagOwners(name); len(owners) > 0 {
			if f, _ := platforms.SenderOf(owners[0]).Flag(name); f.Order {
				return fmt.Errorf("--%s is for --platform %s only, not %s (%s)", name, strings.Join(owners, " or "), o.platform, f.Usage)
			}
		}
	}
	if !o.eventGiven {
		o.event = sender.Events[0].Name
	}
	if _, ok := sender.Event(o.event); !ok {
		return unknownEvent(o.platform, o.event)
	}
	if o.id == "" {
		o.id = sender.NewID()
	}
	o.orderGiven = o.order != ""
	if o.order == "" {
		o.order = "o-" + o.id
	}
	refundGiven := o.refund != ""
	if o.refund == "" {
		o.refund = o.order + "-r1"
	}
	refundAmountGiven := o.refundAmount != 0
	if o.refundAmount == 0 {
		o.refundAmount = o.amount - o.refundedBefore
	}
	if isRefund(o.event) && (o.refundedBefore < 0 || o.refundAmount <= 0 || o.refundedBefore+o.refundAmount > o.amount) {
		return fmt.Errorf("--refunded-before (%s) and --refund-amount (%s) must be what the order's earlier refunds refunded and this refund's own amount, "+
			"together at most --amount (%s)", keying.MinorToMajor(o.refundedBefore), keying.MinorToMajor(o.refundAmount), keying.MinorToMajor(o.amount))
	}
	n, err := buildNotification(o)
	if err != nil {
		return fmt.Errorf("%s: %v", o.platform, err)
	}
	target := o.url
	var body io.Reader
	if n.method == http.MethodGet {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		target += sep + n.query
	} else {
		body = bytes.NewReader(n.body)
	}
	req, err := http.NewRequest(n.method, target, body)
	if err != nil {
		return err
	}
	if n.header != nil {
		req.Header = n.header
	}
	// A redirect is the answer (Alipay's return is answered with one),
	// not something to follow.
	client := &http.Client{Timeout: o.timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxSendAnswer))
	if err != nil {
		return fmt.Errorf("reading the answer: %v", err)
	}
	replayed := ""
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		replayed = "  Idempotent-Replayed: true"
	}
	what := fmt.Sprintf("order %s, %s", o.order, keying.MinorToMajor(o.amount))
	if isRefund(o.event) {
		what = fmt.Sprintf("order %s, refund %s of %s", o.order, o.refund, keying.MinorToMajor(o.refundAmount))
	}
	fmt.Fprintf(w, "%s %s %s notification %s (%s) → %s\n%s %s%s\n", n.method, o.platform, o.event, o.id, what, o.url, resp.Proto, resp.Status, replayed)
	if loc := resp.Header.Get("Location"); loc != "" {
		fmt.Fprintf(w, "Location: %s\n", loc)
	}
	w.Write(answer)
	if len(answer) > 0 && !bytes.HasSuffix(answer, []byte("\n")) {
		fmt.Fprintln(w)
	}
	ok := resp.StatusCode/100 == 2 || (n.method == http.MethodGet && resp.StatusCode/100 == 3)
	switch {
	case ok:
		again := []string{"--event", o.event, "--id", o.id}
		if o.orderGiven {
			again = append(again, "--order", o.order)
		}
		if o.amount != defaultAmount {
			again = append(again, "--amount", fmt.Sprint(o.amount))
		}
		if isRefund(o.event) && refundGiven {
			again = append(again, "--refund", o.refund)
		}
		if isRefund(o.event) && refundAmountGiven {
			again = append(again, "--refund-amount", fmt.Sprint(o.refundAmount))
		}
		if isRefund(o.event) && o.refundedBefore != 0 {
			again = append(again, "--refunded-before", fmt.Sprint(o.refundedBefore))
		}
		again = append(again, o.orderFlags()...)
		fmt.Fprintf(w, "(send it again: %s)\n", strings.Join(again, " "))
		if o.event == sender.Events[0].Name && sender.RefundEvent != "" {
			// The refund of this order: the same trade where the
			// notification's id is the trade's, a new event of the same
			// order elsewhere.
			refund := []string{"--event", sender.RefundEvent}
			if sender.TradeID {
				refund = append(refund, "--id", o.id)
				if o.orderGiven {
					refund = append(refund, "--order", o.order)
				}
			} else {
				refund = append(refund, "--order", o.order)
			}
			if o.amount != defaultAmount {
				refund = append(refund, "--amount", fmt.Sprint(o.amount))
			}
			refund = append(refund, o.orderFlags()...)
			fmt.Fprintf(w, "(refund this order: %s)\n", strings.Join(refund, " "))
		}
	case resp.StatusCode == http.StatusUnauthorized:
		// Sending it again would be refused the same way.
		fmt.Fprintf(w, "(the route refused the signature: %s)\n", o.signedWith())
	}
	if !ok {
		return fmt.Errorf("the route answered %s", resp.Status)
	}
	return nil
}

// orderFlags are the platform's flags that say whose order it is (a
// service provider's merchants), to send this order's notifications
// again with.
func (o sendOptions) orderFlags() []string {
	var flags []string
	for _, f := range platforms.SenderOf(o.platform).Flags {
		if v := o.flags[f.Name]; f.Order && v != "" {
			flags = append(flags, "--"+f.Name, v)
		}
	}
	return flags
}

// signedWith is the question a refused signature raises: whether the
// route verifies with what the user signed with, named as they gave it.
// Keygen's directory is named only when its keys were used: a user who
// passed --secret whsec_… has nothing to check there.
func (o sendOptions) signedWith() string {
	var flags []string
	for _, f := range []struct{ name, v string }{{"--secret", o.secret}, {"--key", o.keyFile}} {
		if f.v != "" {
			flags = append(flags, f.name)
		}
	}
	for _, f := range platforms.SenderOf(o.platform).Flags {
		if f.Key && o.flags[f.Name] != "" {
			flags = append(flags, "--"+f.Name)
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
// depends on the event, id, order, refund and amounts only, and only the
// signature headers are fresh; Alipay re-signs each retry with a new
// notify_time, and so does send.
func buildNotification(o sendOptions) (notification, error) {
	if o.event == "" {
		o.event = platforms.SenderOf(o.platform).Events[0].Name
	}
	in := keying.SendInput{Event: o.event, ID: o.id, Order: o.order, Amount: o.amount,
		Refund: o.refund, RefundAmount: o.refundAmount, RefundedBefore: o.refundedBefore,
		Secret: o.secret, Flags: o.flags, Now: time.Now(), Value: o.value, PrivateKey: o.privateKey}
	s, err := platforms.SenderOf(o.platform).Sign(in)
	if err != nil {
		return notification{}, errors.New(strings.TrimPrefix(err.Error(), "signer: "))
	}
	method := s.Method
	if method == "" {
		method = http.MethodPost
	}
	return notification{method: method, query: s.Query, header: s.Header, body: s.Body}, nil
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
