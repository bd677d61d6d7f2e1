package command

import (
	"encoding/json"
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
	jsonFlag(c)
	return c
}

func orderCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "order <scope>:<merchant>:<order>",
		Short: "Shows an order's business events: which ran, when, by which channel",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			return adminShow(cmd, http.MethodGet, "/idempotency/orders/"+url.PathEscape(args[0]), url.Values{}, printOrder)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	return c
}

func redeliverCommand() *cobra.Command {
	c := &cobra.Command{
		Use: "redeliver <key> [--force --again] | --state failed|dead (--scope S | --since T) [--limit N] [--dry-run]",
		Short: "Sends a key's journaled notification (or every failed or dead one a filter matches) into its route again; " +
			"exits non-zero unless the key is answered (async: queued or delivering) afterwards",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			state, _ := cmd.Flags().GetString("state")
			if len(args) == 1 {
				if state != "" {
					return fmt.Errorf("give a key or --state, not both")
				}
				return redeliverOne(cmd, args[0])
			}
			if state == "" {
				return fmt.Errorf("which key? redeliver <key>, or --state failed|dead with --scope or --since for every key they match")
			}
			return redeliverBulk(cmd, state)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	c.Flags().Bool("force", false, "Redeliver an answered key too, with --again: its answer is forgotten and the backend runs again")
	c.Flags().Bool("again", false, "With --force: yes, the backend already ran this answered key, and it must run it a second time")
	c.Flags().String("state", "", "Bulk: redeliver every key in this state (failed or dead)")
	c.Flags().String("scope", "", "Bulk: only keys of this scope")
	c.Flags().String("since", "", "Bulk: only keys that entered their state since then: RFC 3339, or a duration ago (2h)")
	c.Flags().Int("limit", 0, "Bulk: at most this many keys (default: up to 10000)")
	c.Flags().Bool("dry-run", false, "Bulk: list the keys that would be redelivered; send nothing")
	return c
}

// redeliverOne redelivers one key; the error (a non-zero exit) says when
// the key is not answered afterwards.
func redeliverOne(cmd *cobra.Command, key string) error {
	var v admin.RedeliveryView
	if err := adminCall(cmd, http.MethodPost, keyPath(key)+"/redeliver", forceQuery(cmd), &v); err != nil {
		return err
	}
	var err error
	if wantJSON(cmd) {
		err = printJSON(cmd.OutOrStdout(), v)
	} else {
		err = printRedelivery(cmd.OutOrStdout(), v)
	}
	if err != nil {
		return err
	}
	if !v.Succeeded() {
		return fmt.Errorf("key %s is %s after the redelivery (the route answered %d)", key, v.State, v.Status)
	}
	return nil
}

// redeliverBulk runs POST /idempotency/redeliver; the error says when any
// key is not answered afterwards, or the run stopped.
func redeliverBulk(cmd *cobra.Command, state string) error {
	fl := cmd.Flags()
	req := admin.BulkRequest{State: state}
	req.Scope, _ = fl.GetString("scope")
	req.Limit, _ = fl.GetInt("limit")
	req.DryRun, _ = fl.GetBool("dry-run")
	if since, _ := fl.GetString("since"); since != "" {
		t, err := admin.ParseSince(since, time.Now())
		if err != nil {
			return fmt.Errorf("--since must be an RFC 3339 time or a duration ago, not %q", since)
		}
		req.Since = t.UTC()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var v admin.BulkView
	if err := adminCallBody(cmd, http.MethodPost, "/idempotency/redeliver", url.Values{}, body, &v); err != nil {
		return err
	}
	if wantJSON(cmd) {
		err = printJSON(cmd.OutOrStdout(), v)
	} else {
		err = printBulk(cmd.OutOrStdout(), v)
	}
	if err != nil || v.DryRun {
		return err
	}
	failed := 0
	for _, r := range v.Results {
		if !admin.Settled(r.State) {
			failed++
		}
	}
	switch {
	case v.Stopped != "":
		return fmt.Errorf("the run stopped after %d of %d keys: %s", len(v.Results), v.Matched, v.Stopped)
	case failed > 0:
		return fmt.Errorf("%d of %d redelivered keys are not answered afterwards", failed, len(v.Results))
	}
	return nil
}
