package caddymodule

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/registry"
)

// verifyTime is the clock a request's signature is judged against: now, or
// the first receipt of a notification this process redelivers (the admin
// API marks its redeliveries; see registry.MarkRedelivery). Forged marks
// are dropped and change nothing.
func verifyTime(h http.Header) time.Time {
	if at, ok := registry.RedeliveredAt(h); ok {
		return at
	}
	return now()
}
