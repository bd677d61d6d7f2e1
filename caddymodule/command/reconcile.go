package command

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/reconcile"
)

// `idemgate idempotency reconcile`: sends the platform's bill to POST
// /idempotency/reconcile as it reads it, and prints the report — a table
// for people, the API's JSON with --json. Like diff, it exits 1 when the
// bill and what ran differ (the report printed), 2 on an error (a bill
// that does not read, a refused merchant, no gateway), so a daily job
// notices and tells the two apart.

func reconcileCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "reconcile --platform <p> --bill <file|-> [--scope S] [--merchant M] [--json] [--items] [--limit N] [--from T --to T]",
		Short: "Reconciles the platform's bill with what the backend ran",
		Long: `
Sends the platform's bill (Alipay's 业务明细 csv, WeChat Pay's trade bill,
Stripe's balance export, PayPal's settlement report; gzip is fine) to the
gateway, which compares it with the business events its store remembers
(for order_ttl), and prints what it found:

  settled, never run   the platform settled it, the backend never ran it:
                       redeliver (the command is printed) or refund
  run, not settled     the backend ran a payment or refund the bill does
                       not show
  amount differs       the bill's amount is not the notification's:
                       its totals are the differences, bill minus
                       notified
  matched
  pending next bill    ran in the bill day's last 15 minutes, not in this
                       bill: the next day's may settle it. Reconciling
                       that bill matches it, or calls it run, not settled

Payments and refunds are totalled apart: PAYMENTS and REFUNDS (the
refunded amounts; --json: amounts and refund_amounts).

Exit status: 0 when everything matched, 1 when the bill and what ran
differ (the report still printed), 2 on an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			err := runReconcile(cmd)
			var d differ
			if err == nil || errors.As(err, &d) {
				return err // 1: printed "Error: …" as every subcommand's
			}
			return exitStatus(cmd, err, 2)
		},
	}
	adminFlags(c)
	fl := c.Flags()
	var billed []string // in the registry's order
	for _, p := range platforms.All() {
		if platforms.BillOf(p.Name) != nil {
			billed = append(billed, p.Name)
		}
	}
	fl.String("platform", "", "The bill's platform: "+strings.Join(billed, ", "))
	fl.String("bill", "", "The bill's file (- for standard input)")
	fl.String("scope", "", "The routes' scope (default: the platform's name)")
	fl.String("merchant", "", "Alipay: the app_id of the keys (default: told from the route's app_id, the seller_id its notifications signed, or the orders the bill's rows name); WeChat Pay: the mchid (default: each row's 商户号 or 特约商户号)")
	fl.Bool("json", false, "Print the API's JSON")
	fl.Bool("items", false, "List matched events too")
	fl.Int("limit", 0, "Events listed per category (default 100)")
	fl.String("from", "", "Start of the period for \"run, not settled\" (RFC 3339; default: the bill's)")
	fl.String("to", "", "End of that period (RFC 3339)")
	return c
}

// runReconcile sends the bill and prints the report; a differ error when
// the bill and what ran differ.
func runReconcile(cmd *cobra.Command) error {
	fl := cmd.Flags()
	path, _ := fl.GetString("bill")
	asJSON, _ := fl.GetBool("json")
	q := url.Values{}
	for _, name := range []string{"platform", "scope", "merchant", "from", "to"} {
		if v, _ := fl.GetString(name); v != "" {
			q.Set(name, v)
		}
	}
	if q.Get("platform") == "" || path == "" {
		return errors.New("reconcile needs --platform and --bill")
	}
	if items, _ := fl.GetBool("items"); items {
		q.Set("items", "1")
	}
	if n, _ := fl.GetInt("limit"); n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var rep reconcile.Report
	if err := postBill(cmd, q, in, &rep); err != nil {
		return err
	}
	if asJSON {
		if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
	} else {
		printReport(cmd.OutOrStdout(), &rep)
	}
	return findings(&rep)
}

// postBill streams the bill to the admin API and decodes its report.
func postBill(cmd *cobra.Command, q url.Values, bill io.Reader, into *reconcile.Report) error {
	return adminSend(cmd, http.MethodPost, "/idempotency/reconcile", q, "text/csv", bill, into)
}

// differ is the error of a report that found differences: exit status 1,
// where any other error is 2.
type differ struct{ error }

// statusError is err, printed as cobra prints an error ("Error: …"),
// that makes Caddy's Main exit with a status other than 1: it carries
// the one error Main reads a status from, which only
// WrapCommandFuncForCobra makes.
type statusError struct {
	err, exit error
}

func (e statusError) Error() string   { return e.err.Error() }
func (e statusError) Unwrap() []error { return []error{e.err, e.exit} }

func exitStatus(cmd *cobra.Command, err error, status int) error {
	exit := caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return status, nil })(cmd, nil)
	return statusError{err, exit}
}

// findings is the exit status: an error naming the differences, if any.
func findings(rep *reconcile.Report) error {
	var parts []string
	for _, c := range []struct {
		name string
		n    int
	}{{"settled, never run", rep.SettledNeverRun.Count}, {"run, not settled", rep.RunNotSettled.Count},
		{"amount differs", rep.AmountDiffers.Count}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return differ{errors.New("the bill and what ran differ: " + strings.Join(parts, "; "))}
}

// printReport prints a report for people: a summary table, then the
// events of each category that differs.
func printReport(w io.Writer, rep *reconcile.Report) {
	checked := "its totals checked"
	if !rep.Bill.Checked {
		checked = "no totals to check"
	}
	fmt.Fprintf(w, "Reconciled the %s bill (%s, %d rows, %s) against scope %s", rep.Platform, rep.Bill.Layout, rep.Bill.Rows, checked, rep.Scope)
	if len(rep.Merchant) > 0 {
		fmt.Fprintf(w, ", merchant %s", strings.Join(rep.Merchant, ", "))
	}
	fmt.Fprintf(w, ", store %s.\n", rep.Store)
	if p := rep.Period; p != nil {
		fmt.Fprintf(w, "Period: %s to %s (from the %s).\n", p.From.Format("2006-01-02 15:04 -07:00"), p.To.Format("2006-01-02 15:04 -07:00"), p.Source)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "Note: %s.\n", cliTerms(n))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CATEGORY\tCOUNT\tPAYMENTS\tREFUNDS")
	cats := []struct {
		name, title string
		c           *reconcile.Category
	}{
		{"settled, never run", "Settled, never run — redeliver or refund", &rep.SettledNeverRun},
		{"run, not settled", "Run, not settled — the backend ran what the bill does not show", &rep.RunNotSettled},
		{"amount differs", "Amount differs", &rep.AmountDiffers},
		{"matched", "Matched", &rep.Matched},
		{"pending next bill", "Pending the next bill — " + rep.PendingNextBill.Reason, &rep.PendingNextBill},
	}
	for _, c := range cats {
		// amount differs totals the differences: signed, "+" too.
		gaps := c.c == &rep.AmountDiffers
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.name, c.c.Count, amounts(c.c.Amounts, gaps), amounts(c.c.RefundAmounts, gaps))
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(tw, "skipped (fees, payouts)\t%d\t\t\n", rep.Skipped)
	}
	tw.Flush()
	for _, c := range cats {
		if len(c.c.Items) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", c.title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		// An amount that differs shows by how much: bill minus notified.
		gaps, diff, pad := c.c == &rep.AmountDiffers, "", ""
		if gaps {
			diff, pad = "\tDIFFERENCE", "\t"
		}
		fmt.Fprintln(tw, "LINE\tORDER\tEVENT\tBILL\tNOTIFIED"+diff+"\tSTATE\tKEY")
		for _, it := range c.c.Items {
			line := ""
			if it.Line > 0 {
				line = strconv.Itoa(it.Line)
			}
			d := ""
			if gaps {
				d = "\t" + money(signed(it.Difference), it.Currency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\t%s\t%s\n", line, it.Order, it.Event, money(it.BillAmount, it.Currency),
				money(it.NotifiedAmount, it.Currency), d, it.State, it.Key)
			if it.Redeliver != "" {
				fmt.Fprintf(tw, "\t\t\t\t\t\t"+pad+"→ %s\n", it.Redeliver)
			}
			if it.Note != "" {
				fmt.Fprintf(tw, "\t\t\t\t\t\t"+pad+"  %s\n", cliTerms(it.Note))
			}
		}
		tw.Flush()
		if c.c.ItemsOmitted > 0 {
			fmt.Fprintf(w, "… and %d more (--limit, --json)\n", c.c.ItemsOmitted)
		}
	}
}

// amounts are a category's totals, "CNY 12.30, USD 1.00"; gaps: signed
// ("CNY +1.00").
func amounts(m map[string]string, gaps bool) string {
	var out []string
	for c, v := range m {
		if gaps {
			v = signed(v)
		}
		out = append(out, c+" "+v)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// signed writes a difference with its sign, "+" too ("" stays "").
func signed(v string) string {
	if v == "" || strings.HasPrefix(v, "-") {
		return v
	}
	return "+" + v
}

func money(amount, currency string) string {
	if amount == "" {
		return "—"
	}
	return amount + " " + currency
}
