package caddymodule

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/keying"
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

// successJudge judges a route's backend answers: by the route's `success`
// rule where it writes one, else by the rule of the channel the request
// came by (keying.Preset.Channels: Alipay's notify POST wants 200 +
// `success`, its browser return GET a page or a redirect), else by the
// platform's rule. A `success` rule with body or header conditions says
// what a server's notification is answered: it does not judge a page
// (keying.Channel.Page), which never says `success`; judged by it, a
// return and each of its reloads would be a failure, released to run the
// backend again.
type successJudge struct {
	title    string                              // the platform, for hints
	route    func(int, http.Header, []byte) bool // the route's `success`; nil when none
	reads    bool                                // the route's rule reads the body or a header
	platform func(int, http.Header, []byte) bool
	channels []judgedChannel
}

// judgedChannel is a platform's channel with its rule ready to judge.
type judgedChannel struct {
	*keying.Channel
	ok func(int, http.Header, []byte) bool
}

// newSuccessJudge compiles the route's rule (nil: none written) and the
// preset's channels; every rule judges the body decoded, at most limit
// bytes of it.
func newSuccessJudge(p *keying.Preset, pl keying.Platform, route *SuccessRule, limit int64) (*successJudge, error) {
	j := &successJudge{title: p.Title, platform: judgedDecoded(pl.Success, limit)}
	if j.title == "" {
		j.title = p.Name
	}
	if route != nil {
		rule, err := route.compile()
		if err != nil {
			return nil, err
		}
		j.route = judgedDecoded(rule, limit)
		j.reads = route.saysBusinessRan()
	}
	for i := range p.Channels {
		c := &p.Channels[i]
		j.channels = append(j.channels, judgedChannel{Channel: c, ok: judgedDecoded(c.Success, limit)})
	}
	return j, nil
}

// channel is the channel a request of method comes by; nil for one the
// platform does not tell apart.
func (j *successJudge) channel(method string) *judgedChannel {
	for i := range j.channels {
		if slices.Contains(j.channels[i].Methods, method) {
			return &j.channels[i]
		}
	}
	return nil
}

// routeJudges tells whether the route's `success` rule judges answers on
// channel c (nil: a request the platform does not tell apart).
func (j *successJudge) routeJudges(c *judgedChannel) bool {
	return j.route != nil && (c == nil || !c.Page || !j.reads)
}

// judge tells whether the answer to a request of method means "handled".
func (j *successJudge) judge(method string, status int, header http.Header, body []byte) bool {
	c := j.channel(method)
	if j.routeJudges(c) {
		return j.route(status, header, body)
	}
	if c != nil {
		return c.ok(status, header, body)
	}
	return j.platform(status, header, body)
}

// hint says how to fix a route whose answer was judged a failure (to a
// request of method) where another of the platform's rules would take
// it as a success: a browser return judged by the notify's rule, or by a
// `success` line copied from the notify route. "" when none would.
func (j *successJudge) hint(method string, status int, header http.Header, body []byte) string {
	if status < 200 || status >= 400 {
		return ""
	}
	own := j.channel(method)
	routed := j.routeJudges(own)
	for i := range j.channels {
		c := &j.channels[i]
		if !c.ok(status, header, body) {
			continue
		}
		methods := strings.Join(c.Methods, ", ")
		switch {
		case routed && c == own:
			return fmt.Sprintf("this request came by %s's %s (%s), whose rule takes this answer (%s), but the route's `success` line refuses it: "+
				"drop that line (each channel is then judged by its own rule) or write one this answer meets", j.title, c.Name, methods, c.Rule)
		case routed:
			return fmt.Sprintf("%s's %s (%s) would take this answer (%s), this route's `success` line does not: "+
				"if the route takes %s's %s, drop that line", j.title, c.Name, methods, c.Rule, j.title, c.Name)
		case own != nil && c != own:
			return fmt.Sprintf("%s's %s (%s) wants %s; this answer is a success only on its %s (%s: %s): "+
				"the backend must answer the %s so, or the route write its own `success` rule", j.title, own.Name,
				strings.Join(own.Methods, ", "), own.Rule, c.Name, methods, c.Rule, own.Name)
		}
	}
	return ""
}

// SuccessRule overrides what answer counts as handled.
type SuccessRule struct {
	// Statuses are codes ("200", "302") or classes ("2xx").
	Statuses []string `json:"statuses,omitempty"`
	// Body, if set, must equal the answer's body (surrounding white space
	// trimmed), as Alipay's "success".
	Body string `json:"body,omitempty"`
	// Header, if set, names answer header fields that must hold these
	// values (surrounding white space trimmed): a backend that answers
	// 200 both for "paid" and for "not paid yet" says which in a header.
	Header map[string]string `json:"header,omitempty"`
}

// saysBusinessRan tells whether the rule reads more than the status: the
// body or a header, which is what tells "ran" from "not yet" on a route
// whose 2xx alone does not.
func (s *SuccessRule) saysBusinessRan() bool {
	return s != nil && (s.Body != "" || len(s.Header) > 0)
}

// provisionSuccess picks the route's `success` rule, or the platform's
// per channel.
func (h *Handler) provisionSuccess() error {
	j, err := newSuccessJudge(h.preset(), h.platform, h.Success, h.MaxAnswer)
	if err != nil {
		return fmt.Errorf("success: %v", err)
	}
	h.success = j
	return nil
}
