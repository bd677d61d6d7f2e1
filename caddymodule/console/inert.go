package console

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/internal/inert"
)

// Every console page is inert: what a notification carries cannot steer
// what the operator's browser shows.

// render writes a page; a template error is the console's bug, answered 500.
// Every page is inert (inertPage).
func (c *Console) render(w http.ResponseWriter, status int, v *consolePage) error {
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, "page", v); err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("rendering the console: %v", err))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := io.WriteString(w, inertPage(buf.String()))
	return err
}

// inertPage is a page as html/template wrote it (a notification's markup
// escaped), with every character that could steer what it shows made
// harmless, whatever template showed it: control characters, bidi
// overrides and bytes that are not UTF-8 (internal/inert) in a key, a
// header, a body, an error. In text they are written as the CLI and the
// Refused page write them (\x1b, \u202e); inside a tag, where data is
// only an attribute's value (a form's hidden key must post back as it
// is, and no title shows data), as character references, which the
// browser reads back as the same value. html/template escapes < in
// text and > in attributes, so the tags are told apart by them; the
// templates' own text holds no such character.
func inertPage(page string) string {
	if !strings.ContainsFunc(page, inert.Steers) && utf8.ValidString(page) {
		return page
	}
	var b strings.Builder
	b.Grow(len(page) + 64)
	inTag, start := false, 0
	flush := func(end int) {
		if seg := page[start:end]; inTag {
			b.WriteString(charRefs(seg))
		} else {
			b.WriteString(inert.String(seg))
		}
		start = end
	}
	for i := 0; i < len(page); i++ {
		switch {
		case page[i] == '<' && !inTag:
			flush(i)
			inTag = true
		case page[i] == '>' && inTag:
			flush(i + 1)
			inTag = false
		}
	}
	flush(len(page))
	return b.String()
}

// charRefs is s with each character that steers (inert.Steers) and each
// byte that is not UTF-8 written as a character reference.
func charRefs(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString("&#xfffd;")
		case inert.Steers(r):
			fmt.Fprintf(&b, "&#x%x;", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
