package store

import (
	"context"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestRedisPersistence: CheckRedis tells a server without persistence
// from one with AOF, on a single server and on every master of a Cluster.
func TestRedisPersistence(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
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

// TestRedisAOFReport: the report names the masters without AOF and the
// appendfsync of those with it; where CONFIG is renamed (managed Redis),
// INFO still tells whether AOF is on.
func TestRedisAOFReport(t *testing.T) {
	ctx := context.Background()
	check := func(c redis.UniversalClient) RedisReport {
		t.Helper()
		rep, err := CheckRedis(ctx, c, RedisCheckOptions{AllowEviction: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	bare := redistest.Start(t)
	rep := check(bare.Client())
	if no := rep.WithoutAOF(); len(no) != 1 || no[0].Addr != bare.Addr() || len(rep.AOFUnknown()) != 0 {
		t.Fatalf("bare server: without AOF %+v, unknown %+v; want it named", no, rep.AOFUnknown())
	}
	if ms, f := rep.SyncingLeast(); len(ms) != 0 || f != "" {
		t.Fatalf("bare server syncs %q (%+v), want nothing: it has no AOF", f, ms)
	}
	aof := redistest.StartWith(t, redistest.Options{AOF: true})
	rep = check(aof.Client())
	if ms, f := rep.SyncingLeast(); len(rep.WithoutAOF()) != 0 || f != "always" || len(ms) != 1 || rep.Persistence.AppendFsync != "always" {
		t.Fatalf("AOF server: without AOF %+v, syncing %q %+v, persistence %+v; want always", rep.WithoutAOF(), f, ms, rep.Persistence)
	}
	for _, f := range []string{"everysec", "no"} {
		if err := aof.Client().ConfigSet(ctx, "appendfsync", f).Err(); err != nil {
			t.Fatal(err)
		}
		if ms, got := check(aof.Client()).SyncingLeast(); got != f || len(ms) != 1 || ms[0].Addr != aof.Addr() {
			t.Fatalf("appendfsync %s: got %q %+v", f, got, ms)
		}
	}
	if err := aof.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if no := check(aof.Client()).WithoutAOF(); len(no) != 1 {
		t.Fatalf("AOF turned off at run time: without AOF %+v, want the server", no)
	}
	managed := redistest.StartWith(t, redistest.Options{AOF: true, Args: []string{"--rename-command", "CONFIG", ""}})
	rep = check(managed.Client())
	if rep.PersistenceErr == nil || len(rep.WithoutAOF()) != 0 || len(rep.AOFUnknown()) != 0 || rep.Masters[0].AOF != "yes" {
		t.Fatalf("CONFIG renamed: %+v (%v); want AOF read from INFO and the CONFIG error", rep.Masters, rep.PersistenceErr)
	}
}
