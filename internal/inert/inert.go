// Package inert makes text from notifications safe to show an operator:
// keys, bodies, reasons and error texts come from whoever can reach the
// gateway, and an ESC sequence printed raw rewrites a terminal (clears it,
// moves the cursor, sets the window title, on some terminals answers
// back); a bidirectional override reorders what a page shows. String
// writes control characters other than newline and tab, C1 controls,
// bidirectional overrides and bytes that are not UTF-8 as visible escapes
// (\x1b, \u202e). The CLI writes everything through it, and the console
// the bytes of refused notifications.
package inert

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String is s with every character that could steer a terminal escaped.
func String(s string) string {
	if !strings.ContainsFunc(s, Steers) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && Steers(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case Steers(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Steers tells whether r may act on a terminal or reorder what it shows.
func Steers(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional embeddings, overrides, isolates and marks
	}
	return false
}
