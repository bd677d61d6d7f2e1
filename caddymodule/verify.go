package caddymodule

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/caddymodule/redeliver"
)

// verifyTime is the clock a request's signature is judged against: now,
// or, for a notification redelivered with its platform's own signature,
// the time the platform signed it (Wechatpay-Timestamp,
// PAYPAL-TRANSMISSION-TIME), else its first receipt (redeliver.go: only a
// redelivery in process carries the mark, so no request from outside can
// claim one). The journaled copy was verified when it came; its signed
// time is what a backend's own check counts from.
func (h *Handler) verifyTime(r *http.Request) time.Time {
	if rd := redeliver.MarkOf(r.Context()); rd != nil && !rd.Resigned {
		if t, ok := h.preset().SignedTime(r.Header); ok {
			return t
		}
		return rd.FirstSeen
	}
	return h.opts.now()
}
