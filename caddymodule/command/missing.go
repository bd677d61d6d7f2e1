package command

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/platforms"
	"github.com/idemgate/idemgate/store"
)

// `idemgate idempotency missing`: what catch_up found (补单): payments the
// platform holds that no notification brought (GET /idempotency/missing).
// `idemgate idempotency query`: ask the platform about one order now
// (POST /idempotency/query), "a customer says they paid".

func missingCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "missing [--scope S] [--since 1h|<RFC 3339>] [--json]",
		Short: "Lists payments the platform holds that no notification brought (catch_up), what was done and the outcome",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			q, err := scopedQuery(cmd)
			if err != nil {
				return err
			}
			return adminShow(cmd, http.MethodGet, "/idempotency/missing", q, func(w io.Writer, v admin.MissingView) error {
				if len(v.Missing) == 0 {
					_, err := fmt.Fprintf(w, "nothing missing (store %s)\n", v.Store)
					return err
				}
				return printMissing(w, v.Missing...)
			})
		},
	}
	adminFlags(c)
	jsonFlag(c)
	scopedFlags(c, "Only this scope's", "Only those updated since then: RFC 3339, or a duration ago (1h)")
	return c
}

func queryCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "query --platform " + strings.Join(platforms.ByOrder(), "|") + " [--scope S] [--trade-no] <out_trade_no> [--json]",
		Short: "Asks the platform about one order now (catch_up): recovers it if it is paid and its payment never ran",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			fl := cmd.Flags()
			platform, _ := fl.GetString("platform")
			scope, _ := fl.GetString("scope")
			byTrade, _ := fl.GetBool("trade-no")
			if platform == "" {
				return fmt.Errorf("--platform is required (%s)", strings.Join(platforms.ByOrder(), ", "))
			}
			q := url.Values{"platform": {platform}}
			if scope != "" {
				q.Set("scope", scope)
			}
			body := admin.QueryRequest{OutTradeNo: args[0]}
			if byTrade {
				body = admin.QueryRequest{TradeNo: args[0]}
			}
			b, _ := json.Marshal(body)
			if wantJSON(cmd) {
				return adminCallBody(cmd, http.MethodPost, "/idempotency/query", q, b, nil)
			}
			var m store.Missing
			if err := adminCallBody(cmd, http.MethodPost, "/idempotency/query", q, b, &m); err != nil {
				return err
			}
			return printMissing(cmd.OutOrStdout(), m)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	c.Flags().String("platform", "", "The route's platform: "+strings.Join(platforms.ByOrder(), " or "))
	c.Flags().String("scope", "", "The route's scope (default: the platform's name)")
	c.Flags().Bool("trade-no", false, "The argument is the platform's trade_no / transaction_id, not the merchant's out_trade_no")
	return c
}

// printMissing prints missing entries as an aligned table.
func printMissing(w io.Writer, ms ...store.Missing) error {
	t := newTable(w, "PLATFORM", "ID", "ORDER NO", "AMOUNT", "HAPPENED", "ACTION", "OUTCOME", "REASON")
	for _, m := range ms {
		amount := strings.TrimSpace(m.Amount + " " + m.Currency)
		outcome := m.Outcome
		if m.Key != "" {
			outcome += " (" + m.Key + ")"
		}
		happened := "-"
		if !m.At.IsZero() {
			happened = m.At.UTC().Format(time.RFC3339)
		}
		t.row(m.Platform, m.ID, dash(m.MerchantRef), dash(amount), happened, dash(m.Action), outcome,
			dash(m.Reason)+attempts(m.Attempts))
	}
	return t.flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func attempts(n int) string {
	if n <= 1 {
		return ""
	}
	return " [" + strconv.Itoa(n) + " attempts]"
}
