package caddymodule

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

// StoreConfig says where claims and answers live.
type StoreConfig struct {
	// Type is "embedded" (the default: a bbolt file, one process, survives
	// restarts), "memory" (lost on exit; tests and throw-away setups) or
	// "redis" (shared by several gateway instances).
	Type string `json:"type,omitempty"`

	// Path is the embedded store's file. Default: idempotency/idemgate.db
	// under Caddy's data directory.
	Path string `json:"path,omitempty"`

	// Addresses are Redis addresses (host:port) or redis:// / rediss://
	// URLs. One address is a single server, several are a Cluster, and with
	// MasterName they are Sentinels.
	Addresses []string `json:"addresses,omitempty"`
	// MasterName selects Redis Sentinel mode.
	MasterName string `json:"master_name,omitempty"`
	// Username and Password authenticate to Redis; {env.*} and {file.*}
	// placeholders are resolved once at start.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// DB is the Redis database number (single and Sentinel only).
	DB int `json:"db,omitempty"`
	// TLS turns on TLS to Redis (implied by rediss:// URLs).
	TLS bool `json:"tls,omitempty"`
	// Prefix starts every Redis key. Default: "idem".
	Prefix string `json:"prefix,omitempty"`
	// PoolSize is the Redis connection pool size per node; 0 lets the client
	// choose (10 per CPU).
	PoolSize int `json:"pool_size,omitempty"`
	// WaitReplicas, above 0, confirms every store call with WAIT on that
	// many replicas: Redis replicates asynchronously, so without it a
	// Sentinel or Cluster failover can lose a claim or an answer the old
	// master acknowledged, and the backend runs twice. A call not
	// confirmed within WaitTimeout (default 1s) is a store error.
	WaitReplicas int `json:"wait_replicas,omitempty"`
	// WaitTimeout bounds each WAIT. Default: 1s.
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`
	// AllowEviction lets the gateway start on a Redis whose
	// maxmemory-policy is not noeviction. Without it such a Redis is
	// refused at start: an evicted answer or claim makes its key new
	// again, and the platform's next retry runs the backend twice.
	AllowEviction bool `json:"allow_eviction,omitempty"`
}

// id names a store configuration for the pool, the admin API and logs;
// it holds no secret.
func (sc StoreConfig) id() string {
	switch sc.Type {
	case "memory":
		return "memory"
	case "redis":
		id := "redis:" + strings.Join(redactURLs(sc.Addresses), ",")
		if sc.MasterName != "" {
			id += "/" + sc.MasterName
		}
		if sc.DB != 0 {
			id += fmt.Sprintf("/db%d", sc.DB)
		}
		if p := sc.prefix(); p != "idem" {
			id += "/" + p
		}
		return id
	default:
		return "embedded:" + sc.Path
	}
}

func (sc StoreConfig) prefix() string {
	if sc.Prefix == "" {
		return "idem"
	}
	return sc.Prefix
}

// resolve returns a copy of sc with defaults filled and placeholders
// replaced; sc itself (the handler's config) is left as written.
func (sc StoreConfig) resolve(repl *caddy.Replacer) (StoreConfig, error) {
	switch sc.Type {
	case "", "embedded":
		sc.Type = "embedded"
		if sc.Path == "" {
			sc.Path = defaultEmbeddedPath()
		}
		sc.Path = repl.ReplaceKnown(sc.Path, "")
	case "redis":
		sc.Username = repl.ReplaceKnown(sc.Username, "")
		sc.Password = repl.ReplaceKnown(sc.Password, "")
		addrs := make([]string, len(sc.Addresses))
		for i, a := range sc.Addresses {
			addrs[i] = repl.ReplaceKnown(a, "")
		}
		sc.Addresses = addrs
	case "memory":
	default:
		return sc, fmt.Errorf("unknown store type %q", sc.Type)
	}
	return sc, nil
}

// loadStore takes a reference to the shared store for sc (already
// resolved: path filled, placeholders replaced). The store is opened by
// the reference's first Open, when the config starts (app.go), never
// while it is only validated; a Redis store is then checked first, for at
// most timeout (see store_checks.go).
func loadStore(sc StoreConfig, timeout time.Duration, logger *zap.Logger) (*app.StoreRef, error) {
	key, err := sc.poolKey()
	if err != nil {
		return nil, err
	}
	return app.LoadStore(key, func() (*app.Store, error) {
		s, client, err := openStore(sc)
		if err != nil {
			return nil, err
		}
		if rc, ok := client.(redis.UniversalClient); ok {
			if client, err = checkRedis(rc, s, sc, timeout, logger); err != nil {
				_ = s.Close()
				_ = rc.Close()
				return nil, err
			}
		}
		return &app.Store{ID: sc.id(), Store: s, Settler: store.NewSettler(s, store.SettlerOptions{}), Client: client}, nil
	})
}

// unloadStore drops this handler's reference to sc's store.
func unloadStore(sc StoreConfig) error {
	key, err := sc.poolKey()
	if err != nil {
		return err
	}
	return app.UnloadStore(key)
}

// poolKey is the whole resolved configuration, so two handlers whose
// configurations differ only by a password do not share a store.
func (sc StoreConfig) poolKey() (string, error) {
	b, err := json.Marshal(sc)
	return string(b), err
}

// openStore opens the store sc names; client is what must be closed
// besides the store (the Redis client), or nil.
func openStore(sc StoreConfig) (s store.Store, client io.Closer, err error) {
	switch sc.Type {
	case "memory":
		return store.NewMemory(), nil, nil
	case "redis":
		opts, err := sc.universalOptions()
		if err != nil {
			return nil, nil, err
		}
		logRedisThroughZap()
		c := redis.NewUniversalClient(opts)
		return store.NewRedis(c, store.RedisOptions{Prefix: sc.prefix(),
			WaitReplicas: sc.WaitReplicas, WaitTimeout: time.Duration(sc.WaitTimeout)}), c, nil
	case "embedded", "":
		if err := os.MkdirAll(filepath.Dir(sc.Path), 0o700); err != nil {
			return nil, nil, err
		}
		s, err := store.NewEmbedded(sc.Path, store.EmbeddedOptions{})
		return s, nil, err
	}
	return nil, nil, fmt.Errorf("unknown store type %q", sc.Type)
}

// check refuses, without opening anything, what cannot work: a Redis
// address that is neither host:port nor a redis:// or rediss:// URL, a
// URL that does not parse (its database included), options that do not
// fit together. `caddy validate` runs it; nothing is dialed.
func (sc StoreConfig) check() error {
	if sc.Type != "redis" {
		return nil
	}
	for _, a := range sc.Addresses {
		if strings.Contains(a, "://") {
			continue // universalOptions parses URLs below
		}
		if err := checkHostPort(a); err != nil {
			return fmt.Errorf("redis address %q: %v; write host:port or a redis:// URL", redactURL(a), err)
		}
	}
	if sc.DB < 0 {
		return fmt.Errorf("redis db must be 0 or more, not %d", sc.DB)
	}
	_, err := sc.universalOptions()
	return err
}

// checkHostPort refuses what is not host:port with a host name or IP
// address and a port number.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("host %q is not a host name or IP address", host)
		}
	}
	return nil
}

// universalOptions turns addresses (plain or URLs) into go-redis options:
// one address is a single server, several a Cluster, MasterName Sentinel.
func (sc StoreConfig) universalOptions() (*redis.UniversalOptions, error) {
	if len(sc.Addresses) == 0 {
		return nil, fmt.Errorf("redis store needs at least one address")
	}
	opts := &redis.UniversalOptions{
		// Store calls end at the request's store_timeout, not at the
		// client's own read time-out, when Redis stalls.
		ContextTimeoutEnabled: true,
		// RESP2: the store uses no RESP3 feature (its wake-ups are plain
		// Pub/Sub), and on RESP3 go-redis checks every reply for pending
		// push notifications, about 5% of the gateway's CPU per round trip.
		Protocol:   2,
		MasterName: sc.MasterName,
		Username:   sc.Username,
		Password:   sc.Password,
		DB:         sc.DB,
		PoolSize:   sc.PoolSize,
	}
	if sc.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	for _, a := range sc.Addresses {
		if !strings.Contains(a, "://") {
			opts.Addrs = append(opts.Addrs, a)
			continue
		}
		u, err := redis.ParseURL(a)
		if err != nil {
			// go-redis's message may quote the URL, password and all.
			return nil, fmt.Errorf("redis address %s: %v", redactURL(a), strings.ReplaceAll(err.Error(), a, redactURL(a)))
		}
		opts.Addrs = append(opts.Addrs, u.Addr)
		// Credentials, database and TLS come from the first URL that
		// carries them, unless set explicitly.
		if opts.Username == "" {
			opts.Username = u.Username
		}
		if opts.Password == "" {
			opts.Password = u.Password
		}
		if opts.DB == 0 {
			opts.DB = u.DB
		}
		if opts.TLSConfig == nil && u.TLSConfig != nil {
			opts.TLSConfig = u.TLSConfig
		}
	}
	if opts.TLSConfig == nil {
		opts.Dialer = dialPlain
	}
	if len(opts.Addrs) > 1 && opts.MasterName == "" && opts.DB != 0 {
		return nil, fmt.Errorf("redis cluster (several addresses) has no database %d", opts.DB)
	}
	return opts, nil
}

// redactURL drops the password of a redis URL for logs and ids.
func redactURL(a string) string {
	if i := strings.Index(a, "://"); i >= 0 {
		rest := a[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return a[:i+3] + "***@" + rest[at+1:]
		}
	}
	return a
}

func redactURLs(as []string) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = redactURL(a)
	}
	return out
}

// defaultEmbeddedPath is the bbolt file under Caddy's data directory.
func defaultEmbeddedPath() string {
	return filepath.Join(caddy.AppDataDir(), "idempotency", "idemgate.db")
}

// dialPlain dials Redis over TCP and hides the connection's file
// descriptor. go-redis health-checks every pooled connection it hands out
// with a non-blocking peek syscall when it can reach the descriptor; that
// doubles the system calls of a one-command replay. A dead connection is
// still found by the command itself, which go-redis then retries on a new
// one. (TLS connections never expose the descriptor, so they need no help.)
func dialPlain(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := plainDialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return opaqueConn{c}, nil
}

var plainDialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}

// opaqueConn is a net.Conn that does not implement syscall.Conn.
type opaqueConn struct{ net.Conn }
