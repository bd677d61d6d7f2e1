package caddymodule

import (
	"fmt"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms"
)

// The {idempotency.*} placeholders are checked when the config loads: a
// typo such as {idempotency.jsn.id} would otherwise render empty on every
// request and turn every notification into a 400. The braces and the key's
// dependence on the request are checked too (templatecheck.go).

// checkPlaceholders refuses a template of the handler whose braces do not
// pair or that names an unknown {idempotency.*} placeholder, and a key
// that takes nothing from the request. platform is the route's platform
// ("" is generic).
func (h *Handler) checkPlaceholders() error {
	platform := h.Platform
	if platform == "" {
		platform = platforms.Default
	}
	// {idempotency.key} is set once the key is rendered, so the
	// fingerprint and the duplicate's answer can use it, not the key.
	// {idempotency.outcome} is known only once the request is decided.
	templates := []templateUse{
		{name: "key", text: h.Key},
		{name: "fingerprint", text: h.Fingerprint, key: true},
	}
	if d := h.OnDuplicate; d != nil {
		templates = append(templates,
			templateUse{name: "on_duplicate redirect", text: d.Redirect, key: true, outcome: true},
			templateUse{name: "on_duplicate body", text: d.Body, key: true, outcome: true, literal: true})
	}
	for _, tm := range templates {
		if tm.name == "fingerprint" && tm.text == "off" {
			continue
		}
		if err := checkTemplate(platform, holdsSecret(h.mod), tm); err != nil {
			return err
		}
	}
	if h.Key != "" {
		if err := checkVaries("key", h.Key, "{idempotency.form.out_trade_no}"); err != nil {
			return err
		}
	}
	if err := checkPresetKey(platform, holdsSecret(h.mod), h.Key); err != nil {
		return err
	}
	return checkEventRecipe(platform, h.Key, h.Success, h.OnDuplicate)
}

// namesEvents tells whether a route of platform names each notification's
// order and business event ({idempotency.order}, {idempotency.event}).
func namesEvents(platform string, hasSecret bool) bool {
	p := platforms.Lookup(platform)
	return p != nil && p.Orders && (p.SecretFor == "" || hasSecret)
}

// templateUse is one template and which of the handler's own values are
// set by the time it renders.
type templateUse struct {
	name, text   string
	key, outcome bool
	// literal: the template may hold literal braces (a body, JSON).
	literal bool
}

// checkTemplate says what is wrong with one template of a route of
// platform, naming the template and the fix, or nil.
func checkTemplate(platform string, hasSecret bool, tm templateUse) error {
	if err := checkBraces(tm.text, tm.literal); err != nil {
		return fmt.Errorf("%s %q: %v", tm.name, tm.text, err)
	}
	for _, name := range placeholderNames(tm.text) {
		if err := checkPlaceholder(platform, hasSecret, name, tm.key, tm.outcome); err != nil {
			return fmt.Errorf("%s: {%s}: %v", tm.name, name, err)
		}
	}
	return nil
}

// checkPlaceholder says why {name} cannot be used in a template of a route
// of platform, or nil. Placeholders outside idempotency.* are Caddy's.
func checkPlaceholder(platform string, hasSecret bool, name string, keyOK, outcomeOK bool) error {
	rest, ok := strings.CutPrefix(name, "idempotency.")
	if !ok {
		return checkCaddyPlaceholder(name)
	}
	p := platforms.Lookup(platform)
	if p == nil {
		p = &keying.Preset{Name: platform}
	}
	switch rest {
	case "key":
		if !keyOK {
			return fmt.Errorf("the key is not known yet while the key template renders")
		}
		return nil
	case "outcome":
		if !outcomeOK {
			return fmt.Errorf("the outcome is not known yet when this template renders")
		}
		return nil
	case "order", "event":
		// Set from the verified notification, before any template.
		switch {
		case namesEvents(platform, hasSecret):
			return nil
		case p.Orders:
			return fmt.Errorf("the %s preset names an order's business events only with `secret` (%s): they are in the encrypted resource", platform, p.SecretFor)
		}
		return fmt.Errorf("the %s preset names no order: its events are their own (write {idempotency.key}, or a key of your own)", platform)
	}
	kind, path, _ := strings.Cut(rest, ".")
	valid := "{idempotency.json.<path>}, {idempotency.form.<field>}, {idempotency.xml.<element>}"
	if p.Extra {
		valid += ", {idempotency." + platform + ".<path>}"
	}
	switch {
	case kind == "json" || kind == "form" || kind == "xml":
		if path == "" {
			return fmt.Errorf("names no field: write {idempotency.%s.<field>}", kind)
		}
		return nil
	case kind == platform && p.Extra:
		if path == "" {
			return fmt.Errorf("names no field: write {idempotency.%s.<path>}", kind)
		}
		if p.SecretFor != "" && !hasSecret {
			return fmt.Errorf("the %s preset offers its decrypted fields only with `secret` (%s)", platform, p.SecretFor)
		}
		return nil
	case slices.Contains(platforms.Names(), kind):
		if kind == platform {
			return fmt.Errorf("the %s preset offers no {idempotency.%s.*} fields; known: %s, {idempotency.key}, {idempotency.outcome}", kind, kind, valid)
		}
		return fmt.Errorf("this route's platform is %s, not %s; known: %s, {idempotency.key}, {idempotency.outcome}", platform, kind, valid)
	}
	return fmt.Errorf("unknown placeholder; known: %s, {idempotency.key}, {idempotency.outcome}, {idempotency.order}, {idempotency.event}", valid)
}

// placeholderNames lists the placeholders of a template as Caddy's replacer
// parses them (escapes, unclosed braces and all). A "name" holding a {, as
// `"order":"{idempotency.json.id` in the JSON body
// {"order":"{idempotency.json.id}"}, is known to no provider: Caddy keeps
// that brace as text and reads on from the next character, where it finds
// the placeholder inside, so the check reads on too and judges that one.
func placeholderNames(tmpl string) []string {
	var names []string
	repl := caddy.NewEmptyReplacer()
	repl.Map(func(name string) (any, bool) {
		if strings.Contains(name, "{") {
			return nil, false
		}
		names = append(names, name)
		return "", true
	})
	repl.ReplaceKnown(tmpl, "")
	return names
}

// checkPlatform refuses a platform keying does not know, naming the valid
// ones; the Caddyfile adapter calls it so `adapt` fails, not only `run`.
func checkPlatform(name string) error {
	if platforms.Lookup(name) != nil {
		return nil
	}
	return fmt.Errorf("unknown platform %q; valid: %s", name, strings.Join(platforms.Names(), ", "))
}
