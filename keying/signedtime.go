package keying

import (
	"net/http"
	"time"
)

// SignedTime is the time the platform signed a notification whose headers
// are hdr, as SignedAt reads it; false when p signs no time or hdr holds
// none that parses.
func (p *Preset) SignedTime(hdr http.Header) (time.Time, bool) {
	if p.SignedAt == nil || hdr == nil {
		return time.Time{}, false
	}
	return p.SignedAt(hdr)
}

// RefusedAfter is when a backend that checks the platform's signed time
// itself refuses a notification with headers hdr sent as it is: SignedFor
// after its signed time, or after received when the headers name none.
// Zero when p signs no time (SignedFor 0).
func (p *Preset) RefusedAfter(hdr http.Header, received time.Time) time.Time {
	if p.SignedFor <= 0 {
		return time.Time{}
	}
	if t, ok := p.SignedTime(hdr); ok {
		return t.Add(p.SignedFor)
	}
	return received.Add(p.SignedFor)
}
