package store

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Persistence is what a Redis server keeps across its own restart.
type Persistence struct {
	// AOF: appendonly is on.
	AOF bool
	// RDB: snapshots are saved on a schedule (a non-empty save setting).
	RDB bool
	// AppendFsync is appendfsync, how often the AOF reaches the disk:
	// "always" (before each write is answered), "everysec" (a host crash
	// can lose up to a second of answered writes) or "no" (when the
	// operating system flushes); "" when it could not be read. Of several
	// masters, the one that syncs least often.
	AppendFsync string
}

// fsyncRank orders appendfsync settings from the safest; unknown last.
func fsyncRank(s string) int {
	switch s {
	case "always":
		return 0
	case "everysec":
		return 1
	case "no":
		return 2
	}
	return 3
}

// weakerFsync is the one of a and b that syncs least often.
func weakerFsync(a, b string) string {
	if fsyncRank(b) > fsyncRank(a) {
		return b
	}
	return a
}

// persistenceOf asks one server whether it persists (CheckRedis asks
// every master). Whether appendonly is on comes from INFO's aof_enabled
// when rm has it (managed Redis serves INFO where CONFIG is renamed), else
// from CONFIG; rm.AOF and rm.AppendFsync are filled as far as the server
// answers, also when err says what it refused.
func persistenceOf(ctx context.Context, c redis.Cmdable, rm *RedisMaster) (Persistence, error) {
	if rm.AOF == "" {
		v, err := c.ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			return Persistence{}, err
		}
		rm.AOF = v["appendonly"]
	}
	p := Persistence{AOF: rm.AOF == "yes"}
	v, err := c.ConfigGet(ctx, "appendfsync").Result()
	if err != nil {
		return p, err
	}
	rm.AppendFsync = v["appendfsync"]
	p.AppendFsync = rm.AppendFsync
	v, err = c.ConfigGet(ctx, "save").Result()
	if err != nil {
		return p, err
	}
	p.RDB = strings.TrimSpace(v["save"]) != ""
	return p, nil
}
