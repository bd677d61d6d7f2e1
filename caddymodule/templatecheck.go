package caddymodule

import (
	"fmt"
	"strings"
)

// Checks over one template string, run at adapt, validate and provision.
// Caddy's replacer leaves what it cannot parse as literal text: with
// `key {idempotency.form.out_trade_no` (no closing brace) every
// notification renders the same key, and the second order is answered
// with the first one's reply without ever reaching the backend. So a
// template whose braces do not pair is refused, and so is a key that
// names nothing of the request.

// checkBraces says what is wrong with the braces of tmpl, or nil. Braces
// pair as Caddy's replacer pairs them: `{` opens a placeholder that the
// next `}` closes, `\{` and `\}` are literal. A body (literal set) may
// hold literal braces, JSON for instance: there only a `{` followed by a
// placeholder-like name (a letter, then letters, digits, `_`, `-`, `.`,
// with a dot somewhere, as in {idempotency.key}) must be closed.
func checkBraces(tmpl string, literal bool) error {
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		if c == '\\' && i+1 < len(tmpl) && (tmpl[i+1] == '{' || tmpl[i+1] == '}') {
			i++
			continue
		}
		switch c {
		case '}':
			if literal {
				continue
			}
			return fmt.Errorf("the } at character %d closes no {: write the placeholder whole (%s), or \\} for a literal brace",
				i+1, "{"+nameBefore(tmpl, i)+"}")
		case '{':
			if literal && !looksLikePlaceholder(tmpl[i+1:]) {
				continue
			}
			end := closingBrace(tmpl, i+1)
			name := tmpl[i+1 : max(end, i+1)]
			switch {
			case end < 0:
				return fmt.Errorf("the { at character %d is never closed, so Caddy keeps it as literal text: close it (%s), or write \\{ for a literal brace",
					i+1, "{"+nameAfter(tmpl[i+1:])+"}")
			case strings.ContainsRune(name, '{'):
				return fmt.Errorf("the { at character %d is not closed before the next {: close it (%s)",
					i+1, "{"+nameAfter(tmpl[i+1:])+"}")
			case name == "":
				return fmt.Errorf("{} at character %d names no placeholder", i+1)
			}
			i = end
		}
	}
	return nil
}

// closingBrace is the index of the first unescaped } in s from index
// from, or -1.
func closingBrace(s string, from int) int {
	for j := from; j < len(s); j++ {
		switch {
		case s[j] == '\\' && j+1 < len(s) && (s[j+1] == '{' || s[j+1] == '}'):
			j++
		case s[j] == '}':
			return j
		}
	}
	return -1
}

// nameAfter is the placeholder-like name at the start of s, for the fix an
// error suggests.
func nameAfter(s string) string {
	n := 0
	for n < len(s) && isNameByte(s[n]) {
		n++
	}
	if n == 0 {
		return "<name>"
	}
	return s[:n]
}

// nameBefore is the placeholder-like name that ends at s[end].
func nameBefore(s string, end int) string {
	i := end
	for i > 0 && isNameByte(s[i-1]) {
		i--
	}
	if i == end {
		return "<name>"
	}
	return s[i:end]
}

// looksLikePlaceholder: does s (what follows a {) start like the name of
// a placeholder rather than like JSON or prose?
func looksLikePlaceholder(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	n := nameAfter(s)
	return strings.Contains(n, ".")
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// perRequest tells whether the placeholder name takes its value from the
// request being handled. {env.*}, {file.*} and {system.*} are the same
// for every request; {time.*} and {http.request.uuid} differ for every
// copy of one notification.
func perRequest(name string) (varies bool, everyCopy bool) {
	for _, p := range []string{"env.", "file.", "system."} {
		if strings.HasPrefix(name, p) {
			return false, false
		}
	}
	if strings.HasPrefix(name, "time.") || name == "http.request.uuid" {
		return true, true
	}
	return true, false
}

// checkVaries refuses an identity template (a key; an order) that takes
// nothing from the notification: every notification would render the
// same value, so only the first would ever reach the backend. One that
// holds a value changing with every copy ({time.now}) would never catch
// a duplicate, and is refused too. what names the template ("key");
// example is a template that would work.
func checkVaries(what, tmpl, example string) error {
	var fromRequest, everyCopy []string
	for _, name := range placeholderNames(tmpl) {
		varies, unique := perRequest(name)
		switch {
		case unique:
			everyCopy = append(everyCopy, "{"+name+"}")
		case varies:
			fromRequest = append(fromRequest, "{"+name+"}")
		}
	}
	switch {
	case len(everyCopy) > 0:
		return fmt.Errorf("%s %q: %s changes with every copy of a notification, so no duplicate would ever be caught; "+
			"take the %s from the notification only, e.g. %s %s", what, tmpl, strings.Join(everyCopy, ", "), what, what, example)
	case len(fromRequest) == 0:
		return fmt.Errorf("%s %q names no placeholder of the request, so every notification would get the same %s "+
			"and only the first would ever reach the backend; take it from the notification, e.g. %s %s", what, tmpl, what, what, example)
	}
	return nil
}
