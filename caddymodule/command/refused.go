package command

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/store"
)

// `idemgate idempotency refused`: the notifications the gateway refused
// before claiming their key (GET /idempotency/refused), newest first.

func refusedCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "refused [--scope S] [--since 1h|<RFC 3339>] [--limit N] [--json]",
		Short: "Lists notifications refused before any claim (bad signature, empty key, too large, conflict)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			limit, _ := cmd.Flags().GetInt("limit")
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1")
			}
			q, err := scopedQuery(cmd)
			if err != nil {
				return err
			}
			q.Set("limit", strconv.Itoa(limit))
			return adminShow(cmd, http.MethodGet, "/idempotency/refused", q, func(w io.Writer, v admin.RefusedView) error {
				return printRefused(w, v, limit)
			})
		},
	}
	adminFlags(c)
	jsonFlag(c)
	scopedFlags(c, "Only this scope's refusals", "Only refusals since then: RFC 3339, or a duration ago (1h)")
	c.Flags().Int("limit", admin.DefaultPageLimit, fmt.Sprintf("At most this many (the store keeps the latest %d per scope)", store.RefusedCap))
	return c
}

// printRefused prints refusals as a table; the body's kept bytes last, on
// one line (the CLI's writer makes what could steer a terminal visible).
func printRefused(w io.Writer, v admin.RefusedView, limit int) error {
	if len(v.Refused) == 0 {
		_, err := fmt.Fprintf(w, "no refused notifications (store %s)\n", v.Store)
		return err
	}
	t := newTable(w, "TIME", "SCOPE", "ROUTE", "STATUS", "CLASS", "REASON", "LENGTH", "SHA-256", "BODY")
	for _, r := range v.Refused {
		length, sum := "not read", "-"
		if r.Length >= 0 {
			length = strconv.FormatInt(r.Length, 10)
		}
		if r.SHA256 != "" {
			sum = r.SHA256[:min(len(r.SHA256), 16)] + "…"
		}
		reason := r.Reason
		if r.Key != "" {
			reason += " (key " + r.Key + ")"
		}
		t.row(when(r.Time), r.Scope, r.Route, strconv.Itoa(r.Status), r.Class, reason, length, sum,
			bodyLine(r.Prefix, r.Length))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(v.Refused) >= limit {
		_, err := fmt.Fprintf(w, "more may be kept: --limit %d, or --since\n", min(limit*10, store.RefusedCap))
		return err
	}
	return nil
}

// bodyLine is a body's kept first bytes on one line: line breaks and tabs
// as \n, \r, \t; "…" when the body went on.
func bodyLine(prefix []byte, length int64) string {
	if len(prefix) == 0 {
		return ""
	}
	s := strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(string(prefix))
	if length > int64(len(prefix)) {
		s += "…"
	}
	return s
}
