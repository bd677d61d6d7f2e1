package command

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/caddymodule/admin"
)

// The listings of the store's capped lists (refused, missing) select by
// --scope and --since alike.

// scopedFlags adds --scope and --since, each with its help.
func scopedFlags(c *cobra.Command, scopeHelp, sinceHelp string) {
	c.Flags().String("scope", "", scopeHelp)
	c.Flags().String("since", "", sinceHelp)
}

// scopedQuery is the admin API's query for --scope and --since: since as
// an RFC 3339 time, a duration read as this machine's "that long ago", as
// list reads it.
func scopedQuery(cmd *cobra.Command) (url.Values, error) {
	fl := cmd.Flags()
	scope, _ := fl.GetString("scope")
	since, _ := fl.GetString("since")
	q := url.Values{}
	if scope != "" {
		q.Set("scope", scope)
	}
	if since != "" {
		t, err := admin.ParseSince(since, time.Now())
		if err != nil {
			return nil, fmt.Errorf("--since: %s", strings.TrimPrefix(err.Error(), "since "))
		}
		q.Set("since", t.UTC().Format(time.RFC3339Nano))
	}
	return q, nil
}
