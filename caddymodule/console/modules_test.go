package console

// The console's tests run it beside the real handler, whose records and
// queues it shows.
import _ "github.com/idemgate/idemgate/caddymodule"
