package keying

import (
	"net/http"
	"slices"
)

// Channel is one way a platform's notifications reach the gateway, with
// its own success rule: Alipay's server posts its asynchronous notify and
// wants 200 with body `success`, while the buyer's browser brings a signed
// return (GET) that the shop answers with its result page or a redirect.
type Channel struct {
	// Name is the channel as people name it ("notify", "browser return").
	Name string
	// Methods are the request methods that come by this channel.
	Methods []string
	// Rule says the success rule in words, for logs ("200 with body
	// success").
	Rule string
	// Success tells whether the backend's answer on this channel means
	// "handled".
	Success func(status int, header http.Header, body []byte) bool
	// Page: the answer is a page shown to a browser (the shop's result
	// page or a redirect), which never says what a server's notification
	// is answered: a route's `success` rule with body or header conditions
	// judges the other channels, this one keeps its own rule.
	Page bool
}

// ChannelOf is the channel of p that a request of method comes by; nil
// when p names no channels (one rule, Platform.Success) or none takes
// method.
func (p *Preset) ChannelOf(method string) *Channel {
	for i := range p.Channels {
		if slices.Contains(p.Channels[i].Methods, method) {
			return &p.Channels[i]
		}
	}
	return nil
}
