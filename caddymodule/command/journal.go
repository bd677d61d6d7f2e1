package command

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
)

// The journal's subcommands: list by state, redeliver.

func listCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "list --state in_flight|answered|failed|dead [--scope S] [--prefix P] [--since T] [--limit N] [--all] [--cursor C]",
		Short: "Lists keys by state, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			fl := cmd.Flags()
			state, _ := fl.GetString("state")
			scope, _ := fl.GetString("scope")
			prefix, _ := fl.GetString("prefix")
			since, _ := fl.GetString("since")
			limit, _ := fl.GetInt("limit")
			all, _ := fl.GetBool("all")
			cursor, _ := fl.GetString("cursor")
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1")
			}
			if since != "" {
				// A duration reads as "that long ago".
				if d, err := time.ParseDuration(since); err == nil {
					since = time.Now().Add(-d).UTC().Format(time.RFC3339)
				}
			}
			return printKeys(cmd, all, cursor, func(cursor string) url.Values {
				v := url.Values{"state": {state}, "limit": {strconv.Itoa(limit)}}
				for k, s := range map[string]string{"scope": scope, "prefix": prefix, "since": since, "cursor": cursor} {
					if s != "" {
						v.Set(k, s)
					}
				}
				return v
			})
		},
	}
	adminFlags(c)
	c.Flags().String("state", "failed", "in_flight, answered, failed or dead")
	c.Flags().String("scope", "", "Only keys of this scope (<scope>:…)")
	c.Flags().String("prefix", "", "Only keys starting with this (the full key)")
	c.Flags().String("since", "", "Only keys that entered their state since then: RFC 3339, or a duration ago (24h)")
	c.Flags().Int("limit", admin.DefaultPageLimit, "Keys per page (the store may return fewer)")
	c.Flags().Bool("all", false, "Follow the pages to the end and print one list")
	c.Flags().String("cursor", "", "Start at this cursor (the \"next\" of a previous page)")
	return c
}

func orderCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "order <scope>:<merchant>:<order>",
		Short: "Shows an order's business events: which ran, when, by which channel",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			return adminCall(cmd, http.MethodGet, "/idempotency/orders/"+url.PathEscape(args[0]), url.Values{}, nil)
		},
	}
	adminFlags(c)
	return c
}

func redeliverCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "redeliver <key> [--force]",
		Short: "Sends a key's journaled notification through its route again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			return adminCall(cmd, http.MethodPost, keyPath(args[0])+"/redeliver", forceQuery(cmd), nil)
		},
	}
	adminFlags(c)
	c.Flags().Bool("force", false, "Redeliver an answered key too: its answer is forgotten and the backend runs again")
	return c
}
