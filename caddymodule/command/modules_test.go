package command

// The CLI's tests run it against a real gateway: the handler and the admin
// API it talks to.
import (
	_ "github.com/idemgate/idemgate/caddymodule"
	_ "github.com/idemgate/idemgate/caddymodule/admin"
)
