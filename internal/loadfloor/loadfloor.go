// Package loadfloor is the floor under any gateway that keeps idemgate's
// contract on Redis, for scripts/load.sh: a Caddy handler that reads the
// body as the gateway does, runs two round trips of an empty script (a
// first copy's claim before the backend, its answer after) through
// go-redis the way the Redis store sends its scripts, and hands the
// request to the next handler. It keys nothing, verifies nothing, keeps
// nothing: what a first copy costs above it is the gateway's own work;
// what it costs above plain reverse_proxy is what two round trips cost a
// Go gate in Caddy on this machine, whatever it does in them. With work,
// its scripts keep Redis as busy as the store's do (load.sh's busy
// floor), so the gateway's own work is told apart from what Redis's CPU,
// on the same cores, costs the gateway.
//
// Only load.sh's binary carries it (cmd/idemgate's loadfloor build tag).
package loadfloor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/store"
)

func init() {
	caddy.RegisterModule(new(Floor))
	httpcaddyfile.RegisterHandlerDirective("idempotency_floor", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("idempotency_floor", httpcaddyfile.Before, "reverse_proxy")
}

// Floor is the handler: `idempotency_floor <redis address> [direct] [work <n>]`.
type Floor struct {
	Address string `json:"address"`
	// Direct sends every round trip on the client itself, never in a
	// shared batch (what the store did before it shared them).
	Direct bool `json:"direct,omitempty"`
	// Work makes each script run that many commands (EXISTS on its key)
	// before it returns: Redis kept as busy as the store keeps it, with
	// the gateway's side still the floor's. On these shared cores
	// Redis's CPU is taken from the gateway's; this floor tells what that
	// costs the gateway, apart from its own work.
	Work int `json:"work,omitempty"`

	c      *redis.Client
	batch  *store.Batcher
	script *redis.Script // empty, or busy with Work
	args   []any         // the script's arguments after its key
}

func (*Floor) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.idempotency_floor", New: func() caddy.Module { return new(Floor) }}
}

// empty is the script both round trips run: nothing, as cheaply as a
// script can be run; busy is the one they run with Work.
var (
	empty = redis.NewScript("return 1")
	busy  = redis.NewScript("for i = 1, tonumber(ARGV[1]) do redis.call('EXISTS', KEYS[1]) end return 1")
)

// maxBody is the gateway's default max_body.
const maxBody = 1 << 20

func (f *Floor) Provision(caddy.Context) error {
	// The store's client options (caddymodule's universalOptions).
	f.c = redis.NewClient(&redis.Options{Addr: f.Address, ContextTimeoutEnabled: true, Protocol: 2})
	f.batch = store.NewBatcher(f.c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.script = empty
	if f.Work > 0 {
		f.script, f.args = busy, []any{f.Work}
	}
	return f.script.Load(ctx, f.c).Err()
}

func (f *Floor) Cleanup() error {
	if f.c != nil {
		return f.c.Close()
	}
	return nil
}

// roundTrip runs the empty script once on key, as the store runs a write
// script: in a batch shared with the calls under way (store.Batcher),
// never re-sent. Its only bound is the client's read
// time-out: the store's deadline costs next to nothing (one timer per
// 5 ms, caddymodule's deadlines), and the floor leaves it out.
func (f *Floor) roundTrip(key string) error {
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", f.script.Hash(), 1, key}, f.args...)...)
	cmd.SetFirstKeyPos(3)
	if !f.Direct {
		if err := f.batch.Do(ctx, onceCmd{cmd}); err != nil {
			return err
		}
		return cmd.Err()
	}
	return f.c.Process(ctx, onceCmd{cmd})
}

type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func (f *Floor) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// Read as the gateway reads (caddymodule's readAll): into a buffer of
	// the declared size.
	var body []byte
	var err error
	if n := r.ContentLength; n >= 0 && n <= maxBody {
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	}
	if err != nil {
		return caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("reading body: %v", err))
	}
	if len(body) > maxBody {
		return caddyhttp.Error(http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", maxBody))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	key := "floor:{" + r.Header.Get("X-Order") + "}"
	if err := f.roundTrip(key); err != nil {
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	if err := next.ServeHTTP(w, r); err != nil {
		return err
	}
	if err := f.roundTrip(key); err != nil {
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	f := new(Floor)
	return f, f.UnmarshalCaddyfile(h.Dispenser)
}

func (f *Floor) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if !d.Args(&f.Address) {
		return d.ArgErr()
	}
	for d.NextArg() {
		switch d.Val() {
		case "direct":
			f.Direct = true
		case "work":
			var n string
			if !d.Args(&n) {
				return d.ArgErr()
			}
			w, err := strconv.Atoi(n)
			if err != nil || w < 1 {
				return d.Errf("work: %q is not a positive number of commands", n)
			}
			f.Work = w
		default:
			return d.ArgErr()
		}
	}
	return nil
}

var (
	_ caddyhttp.MiddlewareHandler = (*Floor)(nil)
	_ caddy.Provisioner           = (*Floor)(nil)
	_ caddy.CleanerUpper          = (*Floor)(nil)
	_ caddyfile.Unmarshaler       = (*Floor)(nil)
)
