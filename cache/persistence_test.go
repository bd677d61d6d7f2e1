package cache

import (
	"context"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisPersistence: CheckRedis tells a server without persistence
// from one with AOF, on a single server and on every master of a Cluster.
func TestRedisPersistence(t *testing.T) {
	ctx := context.Background()
	persistence := func(ctx context.Context, c redis.UniversalClient) (Persistence, error) {
		rep, err := CheckRedis(ctx, c, RedisCheckOptions{AllowEviction: true})
		if err == nil {
			err = rep.PersistenceErr
		}
		return rep.Persistence, err
	}
	bare := redistest.Start(t).Client()
	p, err := persistence(ctx, bare)
	if err != nil || p.AOF || p.RDB {
		t.Fatalf("bare server: %+v %v, want no AOF, no RDB", p, err)
	}
	aof := redistest.StartWith(t, redistest.Options{AOF: true}).Client()
	if p, err := persistence(ctx, aof); err != nil || !p.AOF {
		t.Fatalf("AOF server: %+v %v, want AOF", p, err)
	}
	if err := bare.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	if p, err := persistence(ctx, bare); err != nil || !p.RDB || p.AOF {
		t.Fatalf("RDB server: %+v %v, want RDB only", p, err)
	}
	cluster := redistest.StartCluster(t, 3).Client()
	if p, err := persistence(ctx, cluster); err != nil || p.AOF || p.RDB {
		t.Fatalf("cluster without persistence: %+v %v", p, err)
	}
}
