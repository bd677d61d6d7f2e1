package caddymodule

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/orders"
	"github.com/idemgate/idemgate/platforms"
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

// Keys that name business events. A preset that names each notification's
// business event (an Alipay order's paid, each refund, its close) keys on
// it by default. A key written by hand that leaves the event out gives the
// order's refunds and its close the payment's key: a refund is then a 422
// ("same key, different fingerprint") on every one of the platform's
// retries, and a close is acked without ever reaching the backend.
// Conversely a generic route keyed as an order's event ("…:<order>:paid",
// the merchant's own status-query route joining the platform's orders)
// records that event as run on every success: if its success rule is the
// bare 2xx, the customer's first poll, answered "200 WAIT_BUYER_PAY"
// before the buyer paid, burns the order's paid event, and the platform's
// payment notification is then answered from it and never forwarded.

// checkPresetKey refuses a hand-written key on a preset that names
// business events when the key provably leaves the event out: it is made
// only of placeholders whose meaning is known ({idempotency.*},
// {http.request.*}) and {idempotency.event} is not among them. A key that
// reads another handler's output (a `map` of the event, {http.vars.*}) may
// carry it and is left alone.
func checkPresetKey(platform string, hasSecret bool, key string) error {
	if key == "" || !namesEvents(platform, hasSecret) {
		return nil
	}
	for _, name := range placeholderNames(key) {
		if name == "idempotency.event" || name == "idempotency.key" {
			return nil
		}
		if !strings.HasPrefix(name, "idempotency.") && !strings.HasPrefix(name, "http.request.") {
			return nil // another handler's output: it may name the event
		}
	}
	return fmt.Errorf("key %q leaves out the business event, so the order's refunds and its close would share the payment's key "+
		"(a refund refused as a conflict on every retry, a close acknowledged without reaching the backend): "+
		"remove `key` to use the %s preset's default, {idempotency.order}:{idempotency.event}, or keep {idempotency.event} in it",
		key, platform)
}

// checkEventRecipe refuses a generic route whose key renders as an order's
// business event unless its success rule reads the body or a header
// (orders.CheckRecipe): only such a rule can tell "the business ran" from
// "not paid yet"; and unless it has on_duplicate, what its callers get
// once the event ran through another channel.
func checkEventRecipe(platform, key string, rule *SuccessRule, onDuplicate *DuplicateAction) error {
	if platform != platforms.Default || key == "" {
		return nil
	}
	return orders.CheckRecipe(key, sampleRender(key), rule.saysBusinessRan(), onDuplicate != nil)
}

// sampleRender renders tmpl with every placeholder as "x", which shows
// the literal shape of the keys it makes.
func sampleRender(tmpl string) string {
	repl := caddy.NewEmptyReplacer()
	repl.Map(func(string) (any, bool) { return "x", true })
	return repl.ReplaceAll(tmpl, "")
}
