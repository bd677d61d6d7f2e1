// Package command is the `idemgate idempotency …` CLI: inspect, list,
// in-flight, redeliver, purge, deliveries, pause and resume are clients of
// the admin API (caddymodule/admin) over HTTP, found as Caddy's own stop
// and reload find it; send and keygen sign test notifications locally
// with internal/signer.
package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
)

func init() {
	caddycmd.RegisterCommand(idempotencyCommand())
}

// idempotencyCommand is `idemgate idempotency …`: every subcommand its
// Usage lists; see the package doc.
func idempotencyCommand() caddycmd.Command {
	return caddycmd.Command{
		Name:  "idempotency",
		Usage: "inspect|order|search|list|redeliver|purge|in-flight|pause|resume|deliveries|reconcile|refused|send|keygen ...",
		Short: "Inspects and purges idempotency keys; sends signed test notifications",
		Long: `
Talks to the running gateway's admin API (/idempotency/ routes).

  idempotency inspect <key> [--body]       show a key's record (state, status,
                                           copies, times, fingerprint digest)
                                           and journal: the notification and
                                           every attempt (--body: the bytes)
  idempotency order <scope>:<merchant>:<order>
                                           an order's business events: which
                                           ran (remembered for order_ttl),
                                           when, by which channel, and the
                                           records of those still kept
  idempotency search <text>               keys of an order as the customer
                                           names it: the merchant's order or
                                           refund number (out_trade_no, …), a
                                           Stripe or PayPal id, or the start
                                           of a key
  idempotency list --state failed|dead|answered|in_flight [--scope S]
                   [--prefix P] [--since 24h|<RFC 3339>] [--all]
                                           keys by state, newest first
  idempotency redeliver <key> [--force --again]
                                           send the journaled notification
                                           into the handler that took it;
                                           prints the answer and the key's
                                           state afterwards, exits 1 unless
                                           answered (async: queued or
                                           delivering) (--force --again:
                                           also an answered key, whose
                                           backend then runs it twice)
  idempotency redeliver --state failed|dead (--scope S | --since 2h)
                   [--limit N] [--dry-run]
                                           every key the filter matches,
                                           4 at a time (async: concurrency)
  idempotency purge <key> [--force]        forget a key: its next copy is
                                           forwarded to the backend again
                                           (--force: also an in-flight key)
  idempotency in-flight [--limit N] [--all] [--cursor C]
                                           list claims whose first copy is
                                           still at the backend
  idempotency deliveries                   deliver async: each scope's queue
                                           (depth, leased, oldest, paused)
  idempotency pause|resume <scope>         stop or restart a scope's
                                           deliveries (acks go on)
  idempotency reconcile --platform <p> --bill <file> [--scope S]
                   [--merchant M] [--json]
                                           the platform's bill against what
                                           the backend ran (对账); exits 1
                                           when they differ, 2 on an error
  idempotency refused [--scope S] [--since 1h|<RFC 3339>] [--limit N]
                                           notifications refused before any
                                           claim (bad signature, empty key,
                                           too large, conflict), newest first

  idempotency missing [--scope S] [--since 1h|<RFC 3339>]
                                           payments the platform holds that
                                           no notification brought (catch_up)
  idempotency query --platform <p> [--scope S] <out_trade_no>
                                           ask the platform about one order
                                           now; recover it if paid

  idempotency send --platform <p> --url <url> [--id <id>]
                                           sign and send a test notification
                                           as the platform does
  idempotency keygen --platform <p|all> [--dir <dir>]
                                           write test keys for send and for
                                           the examples' local Caddyfiles

Output is a table for people (bodies as text); --json prints the admin
API's JSON (inspect, list, in-flight, order, search, deliveries,
redeliver, refused).

The admin endpoint is --address if given, else the admin address of --config
(with --adapter), else Caddy's default (localhost:2019). When the config
loads several stores, --store <id> picks one (the error lists the ids).
Keys are passed as they are; quote them for the shell.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(inspectCommand(), orderCommand(), listCommand(), redeliverCommand(), purgeCommand(), inFlightCommand(),
				pauseCommand(true), pauseCommand(false), deliveriesCommand(), sendCommand(), keygenCommand())
			cmd.AddCommand(reconcileCommand())
			cmd.AddCommand(searchCommand())
			cmd.AddCommand(refusedCommand())
			cmd.AddCommand(missingCommand(), queryCommand())
			makeInert(cmd)
		},
	}
}

// adminFlags are the flags every subcommand takes.
func adminFlags(c *cobra.Command) {
	c.Flags().StringP("config", "c", "", "Configuration file to read the admin address from, if --address is not used")
	c.Flags().StringP("adapter", "a", "", "Name of config adapter to apply (when --config is used)")
	c.Flags().String("address", "", "The address of the admin API endpoint, if not the default")
	c.Flags().String("store", "", "The store id, when the running config loads several")
}

func inspectCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "inspect <key> [--body]",
		Short: "Shows an idempotency key's record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			q := url.Values{}
			if body, _ := cmd.Flags().GetBool("body"); body {
				q.Set("body", "1")
			}
			return adminShow(cmd, http.MethodGet, keyPath(args[0]), q, printRecord)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	c.Flags().Bool("body", false, "Include the bodies: the notification's, the attempts' and the remembered answer's (text as text; base64 with --json)")
	return c
}

func purgeCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "purge <key> [--force]",
		Short: "Forgets an idempotency key so its next copy is forwarded again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			return adminCall(cmd, http.MethodDelete, keyPath(args[0]), forceQuery(cmd), nil)
		},
	}
	adminFlags(c)
	c.Flags().Bool("force", false, "Forget an in-flight key too (its gateway is gone): the next copy may run the backend a second time")
	return c
}

func inFlightCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "in-flight [--limit N] [--all] [--cursor C]",
		Short: "Lists claims whose first copy is still at the backend",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			limit, _ := cmd.Flags().GetInt("limit")
			all, _ := cmd.Flags().GetBool("all")
			cursor, _ := cmd.Flags().GetString("cursor")
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1")
			}
			return printKeys(cmd, all, cursor, func(cursor string) url.Values {
				return url.Values{"state": {"in_flight"}, "limit": {strconv.Itoa(limit)}, "cursor": {cursor}}
			})
		},
	}
	adminFlags(c)
	jsonFlag(c)
	c.Flags().Int("limit", admin.DefaultPageLimit, "Keys per page (the store may return fewer)")
	c.Flags().Bool("all", false, "Follow the pages to the end and print one list")
	c.Flags().String("cursor", "", "Start at this cursor (the \"next\" of a previous page)")
	return c
}

// keyPath is the admin path of key: escaped, so "/" in a key stays in it.
// printKeys prints one page of GET /idempotency/keys (the query q makes for
// cursor), or with all follows the cursors to the end and prints one list.
func printKeys(cmd *cobra.Command, all bool, cursor string, q func(cursor string) url.Values) error {
	if !all {
		return adminShow(cmd, http.MethodGet, "/idempotency/keys", q(cursor), func(w io.Writer, p admin.PageView) error {
			return printRecords(w, p.Store, p.Keys, p.Next)
		})
	}
	total := admin.PageView{Keys: []admin.RecordView{}}
	for {
		var page admin.PageView
		if err := adminCall(cmd, http.MethodGet, "/idempotency/keys", q(cursor), &page); err != nil {
			return err
		}
		total.Store = page.Store
		total.Keys = append(total.Keys, page.Keys...)
		if page.Next == "" {
			if !wantJSON(cmd) {
				return printRecords(cmd.OutOrStdout(), total.Store, total.Keys, "")
			}
			return printJSON(cmd.OutOrStdout(), total)
		}
		cursor = page.Next
	}
}

func keyPath(key string) string {
	return "/idempotency/keys/" + url.PathEscape(key)
}

// adminCall sends one request to the admin API. With into == nil it
// prints the answer as indented JSON; else it decodes into it.
func adminCall(cmd *cobra.Command, method, path string, q url.Values, into any) error {
	return adminCallBody(cmd, method, path, q, nil, into)
}

// adminShow gets path's answer and prints it: the API's JSON with --json,
// else decoded into v and printed for people by show.
func adminShow[V any](cmd *cobra.Command, method, path string, q url.Values, show func(io.Writer, V) error) error {
	if wantJSON(cmd) {
		return adminCall(cmd, method, path, q, nil)
	}
	var v V
	if err := adminCall(cmd, method, path, q, &v); err != nil {
		return err
	}
	return show(cmd.OutOrStdout(), v)
}

// adminAddress is the admin API's address by cmd's flags (--address, or
// the config's), and adds --store to q.
func adminAddress(cmd *cobra.Command, q url.Values) (string, error) {
	fl := cmd.Flags()
	address, _ := fl.GetString("address")
	config, _ := fl.GetString("config")
	adapter, _ := fl.GetString("adapter")
	if store, _ := fl.GetString("store"); store != "" {
		q.Set("store", store)
	}
	var cfg []byte
	if address == "" && config != "" {
		// Loaded here, not by DetermineAdminAPIAddress: Caddy's loader
		// logs "using config from file", "adapted config to JSON" and the
		// adapter's warnings on Caddy's logger, lines that belong to
		// Caddy's start-up, not to a CLI command's output.
		var err error
		if cfg, err = quietConfig(config, adapter); err != nil {
			return "", fmt.Errorf("couldn't determine admin API address: %v", err)
		}
	}
	addr, err := caddycmd.DetermineAdminAPIAddress(address, cfg, config, adapter)
	if err != nil {
		return "", fmt.Errorf("couldn't determine admin API address: %v", err)
	}
	return addr, nil
}

// quietConfig is the JSON config of file (with adapter) as Caddy's
// LoadConfig makes it, without its log lines: the adapter's warnings are
// Caddy's start-up business (caddy adapt, caddy validate), not the CLI's.
func quietConfig(file, adapter string) ([]byte, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("reading config from file: %v", err)
	}
	base := strings.ToLower(filepath.Base(file))
	if adapter == "" && filepath.Ext(base) != ".json" &&
		(strings.HasPrefix(base, "caddyfile") || strings.HasSuffix(base, ".caddyfile")) {
		adapter = "caddyfile" // as Caddy guesses it
	}
	if adapter == "" {
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, fmt.Errorf("config file %s is empty", file)
		}
		return data, nil
	}
	a := caddyconfig.GetAdapter(adapter)
	if a == nil {
		return nil, fmt.Errorf("unrecognized config adapter: %s", adapter)
	}
	cfg, _, err := a.Adapt(data, map[string]any{"filename": file})
	if err != nil {
		return nil, fmt.Errorf("adapting config using %s: %v", adapter, err)
	}
	return cfg, nil
}

// adminCallBody is adminCall with a request body (JSON).
func adminCallBody(cmd *cobra.Command, method, path string, q url.Values, reqBody []byte, into any) error {
	if reqBody == nil {
		return adminSend(cmd, method, path, q, "", nil, into)
	}
	return adminSend(cmd, method, path, q, "application/json", bytes.NewReader(reqBody), into)
}

// adminSend is adminCall with a request body of type ctype read from rb
// as it is sent (nil for none).
func adminSend(cmd *cobra.Command, method, path string, q url.Values, ctype string, rb io.Reader, into any) error {
	adminAddr, err := adminAddress(cmd, q)
	if err != nil {
		return err
	}
	uri := path
	if enc := q.Encode(); enc != "" {
		uri += "?" + enc
	}
	var hdr http.Header
	if rb != nil {
		hdr = http.Header{"Content-Type": {ctype}}
	}
	resp, err := caddycmd.AdminAPIRequest(adminAddr, method, uri, hdr, rb)
	if err != nil {
		return adminError(adminAddr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the admin API's answer: %v", err)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			return fmt.Errorf("decoding the admin API's answer: %v", err)
		}
		return nil
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, bytes.TrimSpace(body), "", "  ") != nil {
		_, err = cmd.OutOrStdout().Write(body)
		return err
	}
	pretty.WriteByte('\n')
	_, err = cmd.OutOrStdout().Write(pretty.Bytes())
	return err
}

// adminHTTPError matches the error AdminAPIRequest makes of an answer >= 400.
var adminHTTPError = regexp.MustCompile(`(?s)^caddy responded with error: HTTP (\d+): (.*)$`)

// adminError turns AdminAPIRequest's error into a plain message: the API's
// own {"error": …} text and the status.
func adminError(addr string, err error) error {
	m := adminHTTPError.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("admin API at %s: %v (is the gateway running with its admin endpoint on?)", addr, err)
	}
	msg := m[2]
	var apiErr struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(msg), &apiErr) == nil && apiErr.Error != "" {
		msg = apiErr.Error
	}
	if m[1] == "404" && msg == "404 page not found\n" {
		msg = "the admin API has no /idempotency/ routes: is this an idemgate build?"
	}
	return errors.New(cliTerms(msg) + " (HTTP " + m[1] + ")")
}

// apiTerms are the admin API's names for what the CLI's flags set, as its
// messages write them, and the flags: the CLI's user typed --merchant, not
// merchant=<app_id>.
var apiTerms = []struct {
	re   *regexp.Regexp
	flag string
}{
	{regexp.MustCompile(`\?store=<id> \(--store\)`), "--store <id>"},
	{regexp.MustCompile(`\?force=1 \(--force\)`), "--force"},
	{regexp.MustCompile(`\bagain=1 \(--again\)`), "--again"},
	{regexp.MustCompile(`\bdry_run: true\b`), "--dry-run"},
	{regexp.MustCompile(`\bfilter \(scope, since\)`), "filter (--scope, --since)"},
	{regexp.MustCompile(`(^|[\s(])(merchant|scope|platform)=`), "$1--$2 "},
}

// cliTerms rewrites an admin API message in the CLI's terms: its flags
// where the API names a parameter or a JSON field.
func cliTerms(msg string) string {
	for _, t := range apiTerms {
		msg = t.re.ReplaceAllString(msg, t.flag)
	}
	return msg
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keys as they are: a<b, not a\u003cb
	return enc.Encode(v)
}

// forceQuery is ?force=1 when --force was given (purge, redeliver), and
// again=1 when --again was (redeliver).
func forceQuery(cmd *cobra.Command) url.Values {
	q := url.Values{}
	if force, _ := cmd.Flags().GetBool("force"); force {
		q.Set("force", "1")
	}
	if again, _ := cmd.Flags().GetBool("again"); again {
		q.Set("again", "1")
	}
	return q
}
