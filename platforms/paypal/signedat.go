package paypal

import (
	"net/http"
	"strings"
	"time"
)

// signedAt reads PAYPAL-TRANSMISSION-TIME, the time PayPal signed the
// transmission (RFC 3339): PayPal's verification refuses it 5 minutes
// after it, whenever it arrives.
func signedAt(hdr http.Header) (time.Time, bool) {
	v := strings.TrimSpace(hdr.Get("PAYPAL-TRANSMISSION-TIME"))
	if v == "" || len(v) > paypalMaxTimeLen {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
