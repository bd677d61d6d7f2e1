package cache

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
}

// persistenceOf asks one server whether it persists (CheckRedis asks
// every master).
func persistenceOf(ctx context.Context, c redis.Cmdable) (Persistence, error) {
	v, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return Persistence{}, err
	}
	p := Persistence{AOF: v["appendonly"] == "yes"}
	v, err = c.ConfigGet(ctx, "save").Result()
	if err != nil {
		return Persistence{}, err
	}
	p.RDB = strings.TrimSpace(v["save"]) != ""
	return p, nil
}
