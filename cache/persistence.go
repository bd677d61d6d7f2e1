package cache

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Persistence is what a Redis server keeps across its own restart.
type Persistence struct {
	// AOF: appendonly is on.
	AOF bool
	// RDB: snapshots are saved on a schedule (a non-empty save setting).
	RDB bool
}

// RedisPersistence asks a Redis server (every master, on Cluster) whether
// it persists. On Cluster a setting counts only when every master has it.
func RedisPersistence(ctx context.Context, c redis.UniversalClient) (Persistence, error) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		all := Persistence{AOF: true, RDB: true}
		var mu sync.Mutex // ForEachMaster runs the masters concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			p, err := persistenceOf(ctx, m)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			all.AOF = all.AOF && p.AOF
			all.RDB = all.RDB && p.RDB
			return nil
		})
		return all, err
	}
	return persistenceOf(ctx, c)
}

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
