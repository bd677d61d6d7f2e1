// Package generic is the platform of a route that names none: any sender,
// no signature, and the route's own key template.
package generic

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// Name is the platform's name, and the registry's default.
const Name = "generic"

// Preset is the platform of a route that names none: any sender, the
// route's own key.
var Preset = &keying.Preset{
	Name: Name, Title: Name,
	KeyRequired: true,
}

// Generic is the platform without signature checks: the key template is
// required, the fingerprint is a digest of the body, success is any 2xx.
type Generic struct{}

func (Generic) Name() string { return Name }

func (Generic) Verify(r *keying.Request) (*keying.Notification, error) {
	n := keying.NewNotification(r)
	n.BodyFingerprint = true
	return n, nil
}

func (Generic) Success(status int, _ http.Header, _ []byte) bool { return keying.Is2xx(status) }

func (Generic) RetryWindow() time.Duration { return 0 }
