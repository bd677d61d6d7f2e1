package cache

import (
	"context"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestRedisPersistence tells a server without persistence from one with
// AOF, on a single server and on every master of a Cluster.
func TestRedisPersistence(t *testing.T) {
	ctx := context.Background()
	bare := redistest.Start(t).Client()
	p, err := RedisPersistence(ctx, bare)
	if err != nil || p.AOF || p.RDB {
		t.Fatalf("bare server: %+v %v, want no AOF, no RDB", p, err)
	}
	aof := redistest.StartWith(t, redistest.Options{AOF: true}).Client()
	if p, err := RedisPersistence(ctx, aof); err != nil || !p.AOF {
		t.Fatalf("AOF server: %+v %v, want AOF", p, err)
	}
	if err := bare.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	if p, err := RedisPersistence(ctx, bare); err != nil || !p.RDB || p.AOF {
		t.Fatalf("RDB server: %+v %v, want RDB only", p, err)
	}
	cluster := redistest.StartCluster(t, 3).Client()
	if p, err := RedisPersistence(ctx, cluster); err != nil || p.AOF || p.RDB {
		t.Fatalf("cluster without persistence: %+v %v", p, err)
	}
}
