package command

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
)

// Output for people: aligned tables and readable bodies by default; the
// admin API's JSON with --json.

// jsonFlag adds --json to a subcommand that prints for people by default.
func jsonFlag(c *cobra.Command) {
	c.Flags().Bool("json", false, "Print the admin API's JSON instead of a table")
}

func wantJSON(cmd *cobra.Command) bool {
	j, _ := cmd.Flags().GetBool("json")
	return j
}

// table is an aligned table on w: a header row, then rows.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = oneLine(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// oneLine keeps a cell on its line.
func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// when is a time for people: UTC to the second, and how long ago or ahead.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t).Round(time.Second)
	rel := "in " + d.String()
	switch {
	case d == 0:
		rel = "now"
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}

// readable is a body for people: text as text (indented), binary as a
// note of its size — never base64.
func readable(b []byte) string {
	if len(b) == 0 {
		return "    (empty)"
	}
	if !utf8.Valid(b) || strings.ContainsFunc(string(b), func(r rune) bool {
		return r < 0x20 && r != '\n' && r != '\r' && r != '\t'
	}) {
		return fmt.Sprintf("    (%d bytes of binary data, not shown; --json has them, base64)", len(b))
	}
	lines := strings.Split(strings.TrimRight(string(b), "\r\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + strings.TrimRight(l, "\r")
	}
	return strings.Join(lines, "\n")
}

// printRecords prints records as a table.
func printRecords(w io.Writer, store string, keys []admin.RecordView, next string) error {
	if len(keys) == 0 {
		_, err := fmt.Fprintf(w, "no keys (store %s)\n", store)
		return err
	}
	t := newTable(w, "KEY", "STATE", "STATUS", "COPIES", "ATTEMPTS", "LAST SEEN", "EVENT", "ORDER NO", "AMOUNT", "PLATFORM RETRIES")
	for _, k := range keys {
		status := "-"
		if k.Status != 0 {
			status = fmt.Sprint(k.Status)
		}
		t.row(k.Key, k.State, status, fmt.Sprint(k.Copies), fmt.Sprint(k.AttemptCount), when(k.LastSeen),
			k.Event, refsText(k.MerchantRefs), amountText(k.Amount), retriesText(k.PlatformRetries))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(w, "more: --cursor %s (or --all)\n", next)
		return err
	}
	return nil
}

// refsText is a row's merchant numbers: the order's, then a refund's
// (Stripe, PayPal: the objects and the merchant's own references).
func refsText(refs []string) string { return strings.Join(refs, " ") }

// amountText is a row's amount and currency; a refund's says so.
func amountText(a *admin.AmountView) string {
	if a == nil {
		return ""
	}
	if a.Refund {
		return a.Value + " " + a.Currency + " refund"
	}
	return a.Value + " " + a.Currency
}

func retriesText(r *admin.RetriesView) string {
	if r == nil {
		return ""
	}
	if r.Left == 0 || r.Next == nil {
		return "none left (the last was due " + r.Last.UTC().Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("%d left, next %s", r.Left, when(*r.Next))
}

// printRecord prints one key's record and journal.
func printRecord(w io.Writer, v admin.RecordView) error {
	t := newTable(w, "FIELD", "VALUE")
	t.row("key", v.Key)
	t.row("store", v.Store)
	if v.Order != "" && v.Event != "" {
		t.row("order", v.Order+"  (event "+v.Event+")")
	}
	t.row("state", v.State)
	if v.NextAttempt != nil {
		t.row("next attempt", when(*v.NextAttempt))
	}
	if v.Amount != nil {
		amt := v.Amount.Value + " " + v.Amount.Currency
		if v.Amount.Refund {
			amt += " (a refund: owed, not received)"
		}
		t.row("amount", amt)
	}
	if v.Status != 0 {
		t.row("status", fmt.Sprint(v.Status))
	}
	t.row("route", v.Route)
	t.row("copies", fmt.Sprintf("%d (forwarded %d, replayed %d, in flight %d)", v.Copies,
		v.CopyOutcomes.Forwarded, v.CopyOutcomes.Replayed, v.CopyOutcomes.InFlight))
	t.row("conflicts", fmt.Sprint(v.Conflicts))
	t.row("first seen", when(v.FirstSeen))
	t.row("last seen", when(v.LastSeen))
	t.row("expires", when(v.ExpiresAt))
	if v.PlatformRetries != nil {
		t.row("platform retries", retriesText(v.PlatformRetries))
	}
	if s := v.Signature; s != nil {
		t.row("redelivery", s.Note)
		if s.RefusedAfter != nil {
			t.row("refused after", when(*s.RefusedAfter))
		}
	}
	if v.Fingerprint != "" {
		t.row("fingerprint", v.Fingerprint)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if n := v.Notification; n != nil {
		fmt.Fprintf(w, "\nnotification: %s %s", n.Method, n.URI)
		if n.OrigURI != "" {
			fmt.Fprintf(w, " (sent to %s)", n.OrigURI)
		}
		fmt.Fprintf(w, ", %d bytes", n.BodySize)
		if n.Truncated {
			fmt.Fprint(w, " (only the first bytes kept: journal_body)")
		}
		fmt.Fprintln(w)
		if n.Body != nil {
			fmt.Fprintln(w, readable(*n.Body))
		}
	}
	if len(v.Attempts) > 0 {
		fmt.Fprintf(w, "\nattempts (%d in all):\n", v.AttemptCount)
		t := newTable(w, "START", "DURATION", "STATUS", "OUTCOME", "ERROR", "RE-SIGNED")
		for _, a := range v.Attempts {
			status, resigned := "-", ""
			if a.Status != 0 {
				status = fmt.Sprint(a.Status)
			}
			if a.Resigned {
				resigned = "yes"
			}
			t.row(a.Start.UTC().Format("2006-01-02 15:04:05.000Z"), a.Duration, status, a.Outcome, a.Error, resigned)
		}
		if err := t.flush(); err != nil {
			return err
		}
		for i, a := range v.Attempts {
			if a.Body != nil {
				fmt.Fprintf(w, "attempt %d's answer:\n%s\n", i+1, readable(*a.Body))
			}
		}
	}
	if v.Body != nil {
		fmt.Fprintf(w, "\nremembered answer (%d, %s):\n%s\n", v.Status, strings.Join(v.HeaderNames, ", "), readable(*v.Body))
	}
	return nil
}

// printRedelivery prints one redelivery's answer.
func printRedelivery(w io.Writer, v admin.RedeliveryView) error {
	t := newTable(w, "FIELD", "VALUE")
	t.row("key", v.Key)
	t.row("route", v.Route)
	status := fmt.Sprint(v.Status)
	switch {
	case v.Replayed:
		status += " (replayed: the backend did not run)"
	case v.ByGateway:
		status += " (the gateway's: no answer came from the backend)"
	}
	t.row("status", status)
	t.row("state", v.State)
	if v.NextAttempt != nil {
		t.row("next attempt", when(*v.NextAttempt))
	}
	if v.Resigned {
		t.row("signature", "signed afresh (same body, current time)")
	}
	if v.Reopened {
		t.row("reopened", "yes: the answered key was made free first (--force --again)")
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "body:\n%s\n", readable([]byte(v.Body)))
	return err
}

// printBulk prints a bulk redelivery's answer.
func printBulk(w io.Writer, v admin.BulkView) error {
	verb := "redelivered"
	if v.DryRun {
		verb = "would be redelivered (dry run: nothing sent)"
	}
	fmt.Fprintf(w, "matched %d keys; %d %s\n", v.Matched, len(v.Results), verb)
	if len(v.Results) > 0 {
		t := newTable(w, "KEY", "STATUS", "STATE", "ERROR")
		for _, r := range v.Results {
			status := "-"
			if r.Status != 0 {
				status = fmt.Sprint(r.Status)
			}
			t.row(r.Key, status, r.State, r.Error)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if v.Stopped != "" {
		fmt.Fprintln(w, "STOPPED:", v.Stopped)
	}
	return nil
}

// printDeliveries prints the async queues.
func printDeliveries(w io.Writer, v admin.DeliveriesView) error {
	if len(v.Deliveries) == 0 {
		_, err := fmt.Fprintln(w, "no deliver async route is running")
		return err
	}
	t := newTable(w, "SCOPE", "PLATFORM", "DEPTH", "LEASED", "OLDEST", "PAUSED", "TO")
	for _, d := range v.Deliveries {
		paused := "no"
		if d.Paused {
			paused = "PAUSED"
		}
		t.row(d.Scope, d.Platform, fmt.Sprint(d.Depth), fmt.Sprint(d.Leased), d.OldestAge, paused, d.To)
	}
	return t.flush()
}

// printOrder prints an order's business events.
func printOrder(w io.Writer, v admin.OrderView) error {
	fmt.Fprintf(w, "order %s (store %s)", v.Order, v.Store)
	if !v.ExpiresAt.IsZero() {
		fmt.Fprintf(w, ", remembered until %s", v.ExpiresAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	t := newTable(w, "EVENT", "STATE", "RAN", "AMOUNT", "CHANNEL", "COPIES", "ATTEMPTS", "KEY")
	for _, e := range v.Events {
		ran, amount := "-", ""
		if !e.Ran.IsZero() {
			ran = e.Ran.UTC().Format("2006-01-02 15:04:05Z")
		}
		if e.Amount != "" {
			amount = e.Amount + " " + e.Currency
		}
		t.row(e.Event, e.State, ran, amount, e.Channel, fmt.Sprint(e.Copies), fmt.Sprint(e.Attempts), e.Key)
	}
	return t.flush()
}
