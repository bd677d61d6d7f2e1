package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// What a gateway checks of its Redis before it relies on it (the
// contract's "Faults, round two"): a server that may evict records, keeps
// nothing across a restart, or refuses the gateway a command, key or
// channel breaks the promise later and silently; CheckRedis says so at
// start.

// RedisCheckOptions say what the store needs of its Redis.
type RedisCheckOptions struct {
	// Prefix is the store's key and channel prefix. Default "idem".
	Prefix string
	// AllowEviction accepts a maxmemory-policy other than noeviction.
	AllowEviction bool
}

// RedisReport is what CheckRedis found.
type RedisReport struct {
	// Major is the lowest major version among the masters (0: unknown).
	Major int
	// Masters are the servers the store writes to: every master of a
	// Cluster, the master of a Sentinel set, or the one server.
	Masters []RedisMaster
	// Persistence is what every master keeps across its restart;
	// PersistenceErr says why it could not all be read (CONFIG renamed or
	// refused on a managed Redis), and Persistence then means nothing:
	// each master's AOF still says what INFO told.
	Persistence    Persistence
	PersistenceErr error
}

// RedisMaster is one master as CheckRedis saw it.
type RedisMaster struct {
	Addr    string
	Version string
	// Policy is maxmemory-policy; MaxMemory is maxmemory in bytes (0: no
	// limit).
	Policy    string
	MaxMemory int64
	// User is the ACL user the store is logged in as ("" when the server
	// does not say).
	User string
	// AOF is appendonly ("yes" or "no", from INFO's aof_enabled, or from
	// CONFIG where INFO lacks it; "" when the server does not say), and
	// AppendFsync is appendfsync ("" when CONFIG is refused).
	AOF         string
	AppendFsync string
}

// EvictionError: a master may evict records (its maxmemory-policy is not
// noeviction) and the store was not told to allow it.
type EvictionError struct {
	Masters []RedisMaster // the masters that may evict
}

func (e *EvictionError) Error() string {
	var at []string
	for _, m := range e.Masters {
		at = append(at, fmt.Sprintf("%s has maxmemory-policy %s (maxmemory %d)", m.Addr, m.Policy, m.MaxMemory))
	}
	return "Redis may evict the gateway's records: " + strings.Join(at, "; ") +
		". An evicted answer or claim makes its key new again, and the platform's next retry runs the backend a second time. " +
		"Give the gateway a Redis instance (or database on a server of its own) with maxmemory-policy noeviction; " +
		"a full server then refuses new claims (503, the platform retries) instead of forgetting answers. " +
		"To run on this one anyway, write allow_eviction in the store redis block"
}

// PermissionError: the store's Redis user lacks rights the store needs.
type PermissionError struct {
	Addr    string
	User    string
	Missing []string // each names the command, key or channel refused, and the ACL rule that grants it
}

func (e *PermissionError) Error() string {
	user := e.User
	if user == "" {
		user = "the configured user"
	}
	return fmt.Sprintf("Redis at %s refuses %s what the gateway needs: %s", e.Addr, user, strings.Join(e.Missing, "; "))
}

// CheckRedis reads every master's version, maxmemory and maxmemory-policy
// (from INFO, which managed Redis serves where CONFIG is renamed), its
// persistence, and the ACL rights the store needs. It returns an
// *EvictionError or a *PermissionError (both, joined, when both hold) for
// what must stop a gateway from starting; any other error means a master
// could not be asked, and the report is partial.
func CheckRedis(ctx context.Context, c redis.UniversalClient, opts RedisCheckOptions) (RedisReport, error) {
	if opts.Prefix == "" {
		opts.Prefix = "idem"
	}
	var (
		mu     sync.Mutex // ForEachMaster runs the masters concurrently
		rep    = RedisReport{Persistence: Persistence{AOF: true, RDB: true, AppendFsync: "always"}}
		denied []*PermissionError
	)
	check := func(ctx context.Context, m *redis.Client) error {
		rm, missing, err := checkMaster(ctx, m, opts.Prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", rm.Addr, err)
		}
		p, perr := persistenceOf(ctx, m, &rm)
		mu.Lock()
		defer mu.Unlock()
		rep.Masters = append(rep.Masters, rm)
		if len(missing) > 0 {
			denied = append(denied, &PermissionError{Addr: rm.Addr, User: rm.User, Missing: missing})
		}
		if perr != nil {
			rep.PersistenceErr = perr
		}
		rep.Persistence.AOF = rep.Persistence.AOF && p.AOF
		rep.Persistence.RDB = rep.Persistence.RDB && p.RDB
		rep.Persistence.AppendFsync = weakerFsync(rep.Persistence.AppendFsync, p.AppendFsync)
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, check)
	case *redis.Client: // a single server, or Sentinel's master
		err = check(ctx, cc)
	default:
		err = fmt.Errorf("cannot check a %T", c)
	}
	if err != nil {
		return rep, err
	}
	slices.SortFunc(rep.Masters, func(a, b RedisMaster) int { return strings.Compare(a.Addr, b.Addr) })
	for _, m := range rep.Masters {
		if v := majorOf(m.Version); v > 0 && (rep.Major == 0 || v < rep.Major) {
			rep.Major = v
		}
	}
	var errs []error
	if !opts.AllowEviction {
		ev := &EvictionError{}
		for _, m := range rep.Masters {
			if m.Policy != "noeviction" {
				ev.Masters = append(ev.Masters, m)
			}
		}
		if len(ev.Masters) > 0 {
			errs = append(errs, ev)
		}
	}
	for _, d := range denied {
		errs = append(errs, d)
	}
	return rep, errors.Join(errs...)
}

// Evicting lists the masters whose policy is not noeviction.
func (r RedisReport) Evicting() []RedisMaster {
	var out []RedisMaster
	for _, m := range r.Masters {
		if m.Policy != "noeviction" {
			out = append(out, m)
		}
	}
	return out
}

// WithoutAOF lists the masters whose appendonly is off: a restart of
// one loses what was written to it since its last RDB snapshot, if any.
func (r RedisReport) WithoutAOF() []RedisMaster {
	return r.mastersWhere(func(m RedisMaster) bool { return m.AOF == "no" })
}

// AOFUnknown lists the masters that did not say whether appendonly is on.
func (r RedisReport) AOFUnknown() []RedisMaster {
	return r.mastersWhere(func(m RedisMaster) bool { return m.AOF != "yes" && m.AOF != "no" })
}

// SyncingLeast lists the masters with AOF whose appendfsync is the least
// often among them, and that setting: "" when no master with AOF said
// (CONFIG refused).
func (r RedisReport) SyncingLeast() ([]RedisMaster, string) {
	weakest := ""
	for _, m := range r.Masters {
		if m.AOF == "yes" && fsyncRank(m.AppendFsync) < 3 && (weakest == "" || fsyncRank(m.AppendFsync) > fsyncRank(weakest)) {
			weakest = m.AppendFsync
		}
	}
	if weakest == "" {
		return nil, ""
	}
	return r.mastersWhere(func(m RedisMaster) bool { return m.AOF == "yes" && m.AppendFsync == weakest }), weakest
}

// Addrs lists masters' addresses for a message.
func Addrs(ms []RedisMaster) string {
	a := make([]string, len(ms))
	for i, m := range ms {
		a[i] = m.Addr
	}
	return strings.Join(a, ", ")
}

func (r RedisReport) mastersWhere(f func(RedisMaster) bool) []RedisMaster {
	var out []RedisMaster
	for _, m := range r.Masters {
		if f(m) {
			out = append(out, m)
		}
	}
	return out
}

// checkMaster reads one master's INFO and checks its ACL rights.
func checkMaster(ctx context.Context, m *redis.Client, prefix string) (RedisMaster, []string, error) {
	rm := RedisMaster{Addr: m.Options().Addr}
	if rm.Addr == "FailoverClient" { // go-redis's name for Sentinel's master
		rm.Addr = "the Sentinel master"
	}
	info, err := m.Info(ctx).Result()
	if err != nil {
		return rm, nil, err
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "redis_version":
			rm.Version = v
		case "maxmemory_policy":
			rm.Policy = v
		case "maxmemory":
			rm.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		case "aof_enabled":
			switch v {
			case "1":
				rm.AOF = "yes"
			case "0":
				rm.AOF = "no"
			}
		}
	}
	if rm.Policy == "" {
		// INFO of Redis before 7 lacks nothing of this; a proxy might.
		if v, err := m.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
			rm.Policy = v["maxmemory-policy"]
		}
	}
	if rm.Policy == "" {
		return rm, nil, errors.New("INFO names no maxmemory_policy")
	}
	missing, err := checkRights(ctx, m, &rm, prefix)
	return rm, missing, err
}

// probeSHA is a digest no script has: EVALSHA answers NOSCRIPT when allowed.
const probeSHA = "0000000000000000000000000000000000000000"

// checkRights lists what m refuses the store: on Redis 7 it asks ACL
// DRYRUN for every command the store and its scripts send, on a key and
// channels of the store's prefix; where DRYRUN is not allowed (a user
// without ACL rights) or not known (Redis 6), it probes EVAL, EVALSHA,
// PUBLISH and SUBSCRIBE themselves, harmlessly.
func checkRights(ctx context.Context, m *redis.Client, rm *RedisMaster, prefix string) ([]string, error) {
	key := prefix + ":{idemgate-check}"
	wake := key + ":wake"
	keyRule, chanRule := "~"+prefix+":*", "&"+prefix+":*"
	if u, err := m.Do(ctx, "ACL", "WHOAMI").Text(); err == nil {
		rm.User = u
	} else if ctx.Err() != nil {
		return nil, err
	}
	if rm.User != "" && majorOf(rm.Version) >= 7 {
		if missing, ok, err := dryRun(ctx, m, rm.User, key, wake, keyRule, chanRule); err != nil || ok {
			return missing, err
		}
	}
	var missing []string
	deny := func(what string, err error) error {
		if err == nil || redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil
		}
		if !redis.HasErrorPrefix(err, "NOPERM") {
			return err
		}
		missing = append(missing, what+" ("+strings.TrimPrefix(err.Error(), "NOPERM ")+")")
		return nil
	}
	probes := []struct {
		what string
		args []any
	}{
		{"EVAL on keys " + keyRule + " (ACL: +eval " + keyRule + ")", []any{"EVAL", "return 1", 1, key}},
		{"EVALSHA on keys " + keyRule + " (ACL: +evalsha " + keyRule + ")", []any{"EVALSHA", probeSHA, 1, key}},
		{"PUBLISH on channel " + wake + " (ACL: +publish " + chanRule + ")", []any{"PUBLISH", wake, ""}},
	}
	for _, p := range probes {
		if err := deny(p.what, m.Do(ctx, p.args...).Err()); err != nil {
			return nil, err
		}
	}
	ps := m.Subscribe(ctx)
	defer ps.Close()
	err := ps.Subscribe(ctx, wake)
	if err == nil {
		_, err = ps.Receive(ctx)
	}
	if err := deny("SUBSCRIBE to channel "+wake+" (ACL: +subscribe "+chanRule+")", err); err != nil {
		return nil, err
	}
	return missing, nil
}

// dryRun asks ACL DRYRUN about every command the store sends; ok is
// false when DRYRUN itself is refused, so the caller probes instead.
func dryRun(ctx context.Context, m *redis.Client, user, key, wake, keyRule, chanRule string) (missing []string, ok bool, err error) {
	type probe struct {
		name string
		args []any
	}
	var probes []probe
	add := func(name string, args ...any) { probes = append(probes, probe{name, args}) }
	add("EVALSHA", "EVALSHA", probeSHA, 1, key)
	add("EVAL", "EVAL", "return 1", 1, key)
	// What the scripts call (a script's commands are checked as the user's
	// own) and what the store sends besides.
	for _, c := range []string{"HGET", "HMGET", "HKEYS", "HEXISTS", "PTTL", "EXISTS", "GET", "ZCARD", "ZSCORE", "SMEMBERS", "MGET", "DEL"} {
		add(c, c, key)
	}
	add("HSET", "HSET", key, "f", "v")
	add("HDEL", "HDEL", key, "f")
	add("HINCRBY", "HINCRBY", key, "f", 1)
	add("SET", "SET", key, "v", "PX", 1, "NX") // a first copy's claim (redis_claim.go)
	add("APPEND", "APPEND", key, "v")
	add("PEXPIRE", "PEXPIRE", key, 1)
	add("ZADD", "ZADD", key, 0, "m")
	add("ZREM", "ZREM", key, "m")
	add("ZRANGE", "ZRANGE", key, 0, 1)
	add("ZREMRANGEBYLEX", "ZREMRANGEBYLEX", key, "[a", "+")
	add("ZREMRANGEBYSCORE", "ZREMRANGEBYSCORE", key, 0, 1)
	add("SADD", "SADD", key, "m")
	add("LPUSH", "LPUSH", key, "v") // the refused list (refused_redis.go)
	add("LTRIM", "LTRIM", key, 0, 1)
	add("LRANGE", "LRANGE", key, 0, 1)
	add("TIME", "TIME")
	add("PING", "PING")
	add("PUBLISH on channel "+wake, "PUBLISH", wake, "x")
	add("SUBSCRIBE to channel "+wake, "SUBSCRIBE", wake)
	cmds := make([]*redis.Cmd, len(probes))
	_, _ = m.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, pr := range probes {
			cmds[i] = p.Do(ctx, append([]any{"ACL", "DRYRUN", user}, pr.args...)...)
		}
		return nil
	})
	for i, c := range cmds {
		v, err := c.Text()
		switch {
		case err != nil && redis.HasErrorPrefix(err, "NOPERM"):
			return nil, false, nil // no right to ask: probe instead
		case err != nil && ctx.Err() != nil:
			return nil, false, err
		case err != nil:
			// Not a command this server knows (or DRYRUN refuses it):
			// the store's calls will say so themselves.
			continue
		case v == "OK":
			continue
		}
		rule := "+" + strings.ToLower(strings.Fields(probes[i].name)[0])
		switch {
		case strings.Contains(v, "channel"):
			rule += " " + chanRule
		case strings.Contains(v, "key"):
			rule += " " + keyRule
		}
		missing = append(missing, fmt.Sprintf("%s (%s; ACL: %s)", probes[i].name, v, rule))
	}
	return missing, true, nil
}

// majorOf is the major number of a version such as "7.0.15" (0 if none).
func majorOf(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}

// permissionHint adds to a Redis error refusing the store a right (NOPERM)
// which right, and the ACL rule that grants it.
func (s *Redis) permissionHint(err error) error {
	// A script's own commands are refused as "ERR The user executing the
	// script can't …".
	if err == nil || !redis.HasErrorPrefix(err, "NOPERM") && !strings.Contains(err.Error(), "user executing the script") {
		return err
	}
	return fmt.Errorf("%w (the Redis user needs commands +@all or at least EVAL, EVALSHA and PUBLISH, keys ~%s:* and channels &%s:*: ACL SETUSER <user> ~%s:* &%s:* +@all)",
		err, s.prefix, s.prefix, s.prefix, s.prefix)
}
