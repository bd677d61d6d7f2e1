// Package cfparse holds the Caddyfile argument readers the idempotency
// directives share (the handler's, its store, deliver and alert blocks,
// and the console's): one subdirective loop that refuses duplicates, and
// readers for one argument, a list, a duration and a size, each with an
// error that names what was expected.
package cfparse

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
)

// Block runs each for every subdirective of the block at nesting (0 for a
// directive's own block, d.Nesting() for a nested one), refusing a name
// given twice: a later line would otherwise silently win over an earlier
// one. what names the block in that error ("" for the directive itself).
func Block(d *caddyfile.Dispenser, nesting int, what string, each func(name string) error) error {
	seen := map[string]bool{}
	for d.NextBlock(nesting) {
		name := d.Val()
		if seen[name] {
			if what == "" {
				return d.Errf("duplicate subdirective %q", name)
			}
			return d.Errf("%s: duplicate option %q", what, name)
		}
		seen[name] = true
		if err := each(name); err != nil {
			return err
		}
	}
	return nil
}

// ListArg reads one or more arguments into dst.
func ListArg(d *caddyfile.Dispenser, dst *[]string) error {
	*dst = d.RemainingArgs()
	if len(*dst) == 0 {
		return d.ArgErr()
	}
	return nil
}

// OneArg reads exactly one argument into dst.
func OneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// NoArgs refuses arguments after a flag-like subdirective.
func NoArgs(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// DurationArg reads exactly one positive duration into dst.
func DurationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	dur, err := Duration(d)
	if err != nil {
		return err
	}
	*dst = dur
	return NoArgs(d)
}

// Duration parses the current token as a positive duration.
func Duration(d *caddyfile.Dispenser) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(d.Val())
	if err != nil {
		return 0, d.Errf("bad duration %q: %v", d.Val(), err)
	}
	if dur <= 0 {
		return 0, d.Errf("duration must be positive, got %q", d.Val())
	}
	return caddy.Duration(dur), nil
}

// SizeArg reads exactly one size (1MiB, 64KiB) into dst.
func SizeArg(d *caddyfile.Dispenser, dst *int64) error {
	var s string
	if err := OneArg(d, &s); err != nil {
		return err
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > 1<<40 {
		return d.Errf("bad size %q (want e.g. 1MiB, 64KiB)", s)
	}
	*dst = int64(n)
	return nil
}
