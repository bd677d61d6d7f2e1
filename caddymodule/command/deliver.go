package command

import (
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

// The delivery subcommands (deliver async): pause, resume, deliveries.

func pauseCommand(pause bool) *cobra.Command {
	name, short := "resume", "Resumes a scope's deliveries: the queue drains"
	if pause {
		name, short = "pause", "Pauses a scope's deliveries on every instance: acks go on, the queue grows"
	}
	c := &cobra.Command{
		Use:   name + " <scope>",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			return adminCall(cmd, http.MethodPost, "/idempotency/deliveries/"+url.PathEscape(args[0])+"/"+name, url.Values{}, nil)
		},
	}
	adminFlags(c)
	return c
}

func deliveriesCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "deliveries",
		Short: "Shows each async scope's delivery queue: depth, leased, oldest, paused",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			return adminShow(cmd, http.MethodGet, "/idempotency/deliveries", url.Values{}, printDeliveries)
		},
	}
	adminFlags(c)
	jsonFlag(c)
	return c
}
