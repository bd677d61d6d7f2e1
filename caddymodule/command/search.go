package command

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
)

// searchCommand is `idemgate idempotency search <text>`: the keys of an
// order as the customer names it (GET /idempotency/search).
func searchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "search <text> [--limit N]",
		Short: "Finds keys by the merchant's order or refund number (out_trade_no, …), a Stripe or PayPal id, or the start of a key",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			text := strings.TrimSpace(strings.Join(args, " "))
			if text == "" {
				return fmt.Errorf("search for what? give the merchant's order number (out_trade_no), a refund number, a Stripe or PayPal id, or the start of a key")
			}
			q := url.Values{"q": {text}}
			if limit, _ := cmd.Flags().GetInt("limit"); limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			return adminShow(cmd, http.MethodGet, "/idempotency/search", q, printSearch)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	c.Flags().Int("limit", 0, "At most this many matches (default and most: 100)")
	return c
}

// printSearch prints the matches as a table: how each was found (the
// reference, or "key prefix"), its key's state, order, event and amount.
func printSearch(w io.Writer, v admin.SearchView) error {
	if len(v.Matches) == 0 {
		_, err := fmt.Fprintf(w, "nothing found for %q (store %s): no notification named it, and no key starts with it\n", v.Q, v.Store)
		return err
	}
	t := newTable(w, "FOUND BY", "STATE", "ORDER", "EVENT", "AMOUNT", "CHANGED", "KEY")
	for _, m := range v.Matches {
		by := m.Ref
		if by == "" {
			by = "key prefix"
		}
		state := string(m.State)
		if m.FromOrder {
			state += " (record expired; the order remembers)"
		}
		amount := ""
		if m.Amount != "" {
			amount = m.Amount + " " + m.Currency
		}
		t.row(by, state, m.Order, m.Event, amount, when(m.Changed), m.Key)
	}
	return t.flush()
}
