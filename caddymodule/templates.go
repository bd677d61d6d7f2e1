package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
)

// renderKeys renders the key and fingerprint templates for a verified
// notification n (the gate's Route.Keys): the body's fields become
// placeholders, and {idempotency.key} is set once the key is known; key
// is set when only the fingerprint failed.
func (h *Handler) renderKeys(r *http.Request, n *keying.Notification, body []byte) (key, fp string, err error) {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if n.Order != "" {
		repl.Set("idempotency.order", n.Order)
		repl.Set("idempotency.event", n.Event)
	}
	bp := &bodyPlaceholders{n: n, platform: h.Platform, req: r}
	repl.Map(bp.get)
	if key, err = renderKey(repl, bp, n, h.scopedKey, h.scope()); err != nil {
		return "", "", err
	}
	repl.Set("idempotency.key", key)
	if fp, err = renderFingerprint(repl, bp, n, body, h.Fingerprint, h.bodyKeyed); err != nil {
		return key, "", err
	}
	return key, fp, nil
}

// maxKeyLen bounds a rendered key; stores put it in their own keys.
const maxKeyLen = 1024

// renderKey renders the key template tmpl, or takes the preset's default,
// with the route's scope in front: the full key (Handler.fullKey). tmpl
// has the scope in front already ("<scope>:<template>", scopedKey), so
// the key is one string, not a rendered one put behind the scope.
// Every placeholder of a template must render non-empty: a missing order
// id must not collapse distinct notifications onto one key.
func renderKey(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification, tmpl, scope string) (string, error) {
	var key string
	if tmpl != "" {
		var empty []string
		out, err := repl.ReplaceFunc(tmpl, func(name string, val any) (any, error) {
			if caddy.ToString(val) == "" {
				empty = append(empty, "{"+name+"}")
			}
			return val, bp.ambiguous(name)
		})
		if err != nil {
			return "", fmt.Errorf("key: %w", err)
		}
		if bp.err != nil {
			return "", fmt.Errorf("key: %w", bp.err)
		}
		if len(empty) > 0 {
			return "", fmt.Errorf("key: %s is empty", strings.Join(empty, ", "))
		}
		// The scope renders as itself: letters, digits, _, - and . only.
		if strings.TrimSpace(out[len(scope)+1:]) == "" {
			return "", errors.New("no idempotency key in this request")
		}
		key = out
	} else {
		if strings.TrimSpace(n.Key) == "" {
			return "", errors.New("no idempotency key in this request")
		}
		key = scope + ":" + n.Key
	}
	if len(key) > maxKeyLen {
		return "", fmt.Errorf("key is longer than %d bytes", maxKeyLen)
	}
	if strings.ContainsFunc(key, unicode.IsControl) {
		// A key is shown to operators (CLI, console, logs with log_keys):
		// terminal escapes in it would steer their screens. No platform
		// names an order with control characters.
		return "", errors.New("key holds control characters")
	}
	return key, nil
}

// renderFingerprint returns the digest of the fingerprint material of
// template tmpl, "" when off (or, bodyKeyed, by default).
func renderFingerprint(repl *caddy.Replacer, bp *bodyPlaceholders, n *keying.Notification, body []byte, tmpl string, bodyKeyed bool) (string, error) {
	switch tmpl {
	case "off":
		return "", nil
	case "":
		if bodyKeyed {
			return "", nil
		}
		return n.FingerprintDigest(body), nil
	}
	out, err := repl.ReplaceFunc(tmpl, func(name string, val any) (any, error) {
		return val, bp.ambiguous(name)
	})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	if bp.err != nil {
		return "", fmt.Errorf("fingerprint: %w", bp.err)
	}
	return keying.Digest([]byte(out)), nil
}

// bodyPlaceholders serves {idempotency.json.*}, {idempotency.form.*},
// {idempotency.xml.*} and {idempotency.<platform>.*} from the verified
// notification, and remembers a parse failure so the 400 can say why.
type bodyPlaceholders struct {
	n        *keying.Notification
	platform string
	req      *http.Request
	err      error
}

// ambiguous refuses a template's header, query or form field that the
// request carries more than once: Caddy joins a repeated header's values
// with "," and takes a query or form field's first value, while the
// backend may read the first, the last or all of them — another key than
// the gateway claimed, and the backend runs twice. (Presets read their
// signed fields strictly, keying.ErrAmbiguous.)
//
// The field's description is built only for the error: made on every
// request, it was an allocation of every header- or form-keyed copy.
func (bp *bodyPlaceholders) ambiguous(name string) error {
	var what, field string
	var n int
	if f, ok := strings.CutPrefix(name, "http.request.header."); ok {
		what, field, n = "header", f, len(bp.req.Header.Values(f))
	} else if f, ok := strings.CutPrefix(name, "http.request.uri.query."); ok {
		what, field, n = "query field", f, len(bp.req.URL.Query()[f])
	} else if f, ok := strings.CutPrefix(name, "idempotency.form."); ok {
		what, field, n = "form field", f, bp.n.Fields.FormCount(f)
	}
	if n > 1 {
		return fmt.Errorf("%s %s appears %d times in this request: a backend may read another value than the gateway keys on", what, field, n)
	}
	return nil
}

func (bp *bodyPlaceholders) get(name string) (any, bool) {
	rest, ok := strings.CutPrefix(name, "idempotency.")
	if !ok {
		return nil, false
	}
	kind, path, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	var (
		val string
		err error
	)
	switch kind {
	case "json":
		val, ok, err = bp.n.Fields.JSON(path)
	case "form":
		val, ok, err = bp.n.Fields.Form(path)
	case "xml":
		val, ok, err = bp.n.Fields.XML(path)
	default:
		if kind != bp.platform || bp.n.Extra == nil {
			return nil, false
		}
		val, ok = bp.n.Extra(path)
	}
	if err != nil && bp.err == nil {
		bp.err = err
	}
	return val, ok
}
