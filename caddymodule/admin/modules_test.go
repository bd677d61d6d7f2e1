package admin

// The admin API's tests run it beside the real handler, whose records it
// serves.
import _ "github.com/idemgate/idemgate/caddymodule"
