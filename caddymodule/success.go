package caddymodule

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// compile turns a success rule into a predicate.
func (s SuccessRule) compile() (func(int, http.Header, []byte) bool, error) {
	type span struct{ lo, hi int }
	var spans []span
	for _, st := range s.Statuses {
		if len(st) == 3 && strings.HasSuffix(strings.ToLower(st), "xx") && st[0] >= '1' && st[0] <= '5' {
			c := int(st[0]-'0') * 100
			spans = append(spans, span{c, c + 99})
			continue
		}
		c, err := strconv.Atoi(st)
		if err != nil || c < 100 || c > 999 {
			return nil, fmt.Errorf("%q is not a status code or class like 2xx", st)
		}
		spans = append(spans, span{c, c})
	}
	if len(spans) == 0 {
		spans = []span{{200, 299}}
	}
	want := strings.TrimSpace(s.Body)
	return func(status int, header http.Header, body []byte) bool {
		for _, sp := range spans {
			if status >= sp.lo && status <= sp.hi {
				return (want == "" || string(bytes.TrimSpace(body)) == want) && s.headersMatch(header)
			}
		}
		return false
	}, nil
}

// headersMatch tells whether every header condition of the rule holds.
func (s SuccessRule) headersMatch(h http.Header) bool {
	for name, want := range s.Header {
		if strings.TrimSpace(h.Get(name)) != strings.TrimSpace(want) {
			return false
		}
	}
	return true
}
