package command

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/platforms"
)

// The business events send signs: each preset's Sender lists them, and
// --event picks one, as the Stripe CLI's `trigger <event>` does.

// isRefund tells a refund's event by its name, as every preset names it.
func isRefund(event string) bool { return strings.Contains(strings.ToLower(event), "refund") }

// eventList is the events platform's Sender makes, one a line, the
// default first.
func eventList(platform string) string {
	var b strings.Builder
	s := platforms.SenderOf(platform)
	width := 0
	for _, e := range s.Events {
		width = max(width, len(e.Name))
	}
	for i, e := range s.Events {
		about := e.About
		if i == 0 {
			about += " (the default)"
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, e.Name, about)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// eventTable is every platform's events, for send --help.
func eventTable() string {
	var b strings.Builder
	for _, p := range sendPlatforms {
		line, name := "", p
		for i, e := range platforms.SenderOf(p).Events {
			if i > 0 && len(line)+len(e.Name) > 56 {
				fmt.Fprintf(&b, "  %-18s %s,\n", name, line)
				line, name = "", ""
			}
			if line != "" {
				line += ", "
			}
			line += e.Name
		}
		fmt.Fprintf(&b, "  %-18s %s\n", name, line)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// unknownEvent is the error for an --event platform does not send (or
// none): the list of those it does.
func unknownEvent(platform, event string) error {
	what := fmt.Sprintf("--event %q is not an event %s sends", event, platform)
	if event == "" {
		what = "--event needs an event"
	}
	return fmt.Errorf("%s; its events:\n%s", what, eventList(platform))
}

// eventFlagError turns a bare trailing --event (no value) into the list
// of the platform's events, or of every platform's when --platform is
// not known yet; other flag errors stay as they are.
func eventFlagError(c *cobra.Command, err error) error {
	if !strings.Contains(err.Error(), "flag needs an argument: --event") {
		return err
	}
	c.SilenceUsage = true
	p, _ := c.Flags().GetString("platform")
	for _, name := range sendPlatforms {
		if name == p {
			return unknownEvent(p, "")
		}
	}
	return errors.New("--event needs an event; the events of each --platform:\n" + eventTable())
}
