package caddymodule

import (
	"fmt"
	"strings"
)

// An on_duplicate redirect sends the customer's browser somewhere from
// the merchant's own domain. A template whose scheme or host request
// content could choose (`{idempotency.form.next}`, or `/{…}` with
// next=/evil.example, `https://shop.example.com{…}` with .evil.example)
// makes that domain an open redirect: a link on it lands customers on a
// phishing page. So the part of the template that fixes where the
// redirect goes must be written out before any placeholder.

// redirectOrigin is the start of an on_duplicate redirect template that
// fixes where it goes, which every rendered Location must start with:
// `https://host/` (up to the first `/`, `?` or `#` after the host), the
// first two characters of a path (`/o`, never `//` or `/\`, which
// browsers read as another host), or a relative path up to its first
// `/`, `?` or `#`. An error says why tmpl has no such start.
func redirectOrigin(tmpl string) (string, error) {
	fixed, err := redirectStart(tmpl)
	if err == nil && strings.ContainsAny(fixed, "\\\t\r\n ") {
		return "", fmt.Errorf("on_duplicate redirect %q: its start %q holds a backslash or white space, which browsers read their own way; "+redirectAdvice, tmpl, fixed)
	}
	return fixed, err
}

const redirectAdvice = "request content must not choose where the customer is sent: " +
	"write the scheme and host out (https://shop.example.com/orders/{…}) or a path (/orders/{…}) before any placeholder"

func redirectStart(tmpl string) (string, error) {
	lit := tmpl
	if i := strings.IndexByte(tmpl, '{'); i >= 0 {
		lit = tmpl[:i]
	}
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("on_duplicate redirect %q: %s; "+redirectAdvice, tmpl, why)
	}
	switch {
	case lit == "":
		return refuse("it starts with a placeholder")
	case strings.HasPrefix(lit, "//"):
		return refuse("it starts with //, another host")
	case lit[0] == '/':
		if len(lit) < 2 {
			if lit == tmpl {
				return "/", nil
			}
			return refuse("a placeholder right after the first / can add a second one, another host")
		}
		return lit[:2], nil
	}
	if i := strings.Index(lit, "://"); i >= 0 && validScheme(lit[:i]) {
		rest := lit[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			if lit == tmpl && rest != "" {
				return tmpl, nil
			}
			return refuse("a placeholder in or right after its host can change the host")
		}
		if end == 0 {
			return refuse("it names no host")
		}
		return lit[:i+3+end+1], nil
	}
	// A relative path: no scheme may form before its first separator.
	end := strings.IndexAny(lit, "/?#")
	if end < 0 {
		if lit == tmpl {
			return tmpl, nil
		}
		return refuse("a placeholder before its first / can make a scheme")
	}
	if strings.Contains(lit[:end], ":") {
		return refuse("its start reads as a scheme without a host")
	}
	return lit[:end+1], nil
}

// validScheme tells whether s is a URL scheme (RFC 3986).
func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
