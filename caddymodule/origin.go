package caddymodule

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// Where a route came from. Caddy names a provision error by its chain of
// modules ("… route 0: loading handler modules: position 0: …"), which
// tells an operator with several sites nothing: the directive records its
// site, its matcher or path and its file and line at adaptation
// (Handler.RouteOrigin), and Provision and Validate put them in front of
// their errors, after which each error names its subdirective.

// parseDirective is Caddy's RegisterHandlerDirective with the route's
// origin taken before the matcher token is stripped.
func parseDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	dir := h.Token()
	matcher := ""
	if h.NextArg() {
		if t := h.Val(); isMatcherToken(t) {
			matcher = t
		}
	}
	h.Reset()
	h.Next()
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	val, err := parseCaddyfile(h)
	if err != nil {
		return nil, err
	}
	val.(*Handler).RouteOrigin = routeOrigin(h, dir, matcher)
	return h.NewRoute(matcherSet, val), nil
}

// routeOrigin is "<site> [<enclosing directive and matcher>] [<matcher>]
// (<file>:<line>)", e.g. "pay.example.com handle /notify (Caddyfile:12)".
func routeOrigin(h httpcaddyfile.Helper, dir caddyfile.Token, matcher string) string {
	keys, enclosing := siteOf(h, dir)
	var parts []string
	if len(keys) > 0 {
		parts = append(parts, strings.Join(keys, ", "))
	}
	if enclosing != "" {
		parts = append(parts, enclosing)
	}
	if matcher != "" {
		parts = append(parts, matcher)
	}
	parts = append(parts, "("+dir.File+":"+strconv.Itoa(dir.Line)+")")
	return strings.Join(parts, " ")
}

// siteOf reads the server block the directive is in: its addresses, and
// the directive (with its matcher) that encloses this one, as in
// `handle /notify { idempotency … }`. Caddy's Helper keeps the block
// unexported; it is read, never written, and a Caddy whose Helper no
// longer has it leaves both empty (the file and line still say where).
func siteOf(h httpcaddyfile.Helper, dir caddyfile.Token) (keys []string, enclosing string) {
	defer func() {
		if recover() != nil {
			keys, enclosing = nil, ""
		}
	}()
	block := reflect.ValueOf(h).FieldByName("parentBlock")
	if !block.IsValid() {
		return nil, ""
	}
	if ks := block.FieldByName("Keys"); ks.IsValid() {
		for i := 0; i < ks.Len(); i++ {
			keys = append(keys, ks.Index(i).FieldByName("Text").String())
		}
	}
	segs := block.FieldByName("Segments")
	if !segs.IsValid() {
		return keys, ""
	}
	text := func(t reflect.Value) string { return t.FieldByName("Text").String() }
	for i := 0; i < segs.Len(); i++ {
		seg := segs.Index(i)
		if seg.Len() == 0 {
			continue
		}
		first := seg.Index(0)
		if first.FieldByName("File").String() == dir.File && int(first.FieldByName("Line").Int()) == dir.Line {
			return keys, "" // the directive is the site's own
		}
		for j := 1; j < seg.Len(); j++ {
			t := seg.Index(j)
			if text(t) == dir.Text && t.FieldByName("File").String() == dir.File && int(t.FieldByName("Line").Int()) == dir.Line {
				enclosing = text(first)
				if m := matcherOnLine(first.FieldByName("File").String(), int(first.FieldByName("Line").Int()), enclosing); m != "" {
					enclosing += " " + m
				}
				return keys, enclosing
			}
		}
	}
	return keys, ""
}

// matcherOnLine is the matcher token that follows directive at the start
// of line in file. The enclosing directive's adapter has deleted it from
// the tokens in memory (Dispenser.Delete shifts the shared slice), so the
// file is read again; a file that is not there or does not hold directive
// on that line (a config from the admin API) gives "".
func matcherOnLine(file string, line int, directive string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	toks, err := caddyfile.Tokenize(b, file)
	if err != nil {
		return ""
	}
	for i, t := range toks {
		if t.Line != line {
			continue
		}
		if t.Text != directive || i+1 == len(toks) || toks[i+1].Line != line {
			return ""
		}
		if m := toks[i+1].Text; isMatcherToken(m) {
			return m
		}
		return ""
	}
	return ""
}

// isMatcherToken: what Caddy reads as a matcher where a directive's
// first argument may be one.
func isMatcherToken(t string) bool {
	return t == "*" || strings.HasPrefix(t, "/") || strings.HasPrefix(t, "@")
}

// where puts a route's origin in front of a provision or validation
// error; a route from JSON (no origin) keeps the error as it is.
func where(origin string, err error) error {
	if err == nil || origin == "" {
		return err
	}
	return fmt.Errorf("idempotency route %s: %w", origin, err)
}
