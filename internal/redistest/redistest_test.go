package redistest

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testenv"
)

func TestStartRestart(t *testing.T) {
	testenv.Slow(t, "fault: a redis-server stopped and restarted")
	s := Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered while stopped")
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if n, _ := c.Exists(ctx, "a").Result(); n != 0 {
		t.Fatal("data survived a restart without persistence")
	}
}

func TestCluster(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	c := StartCluster(t, 3)
	ctx := context.Background()
	cl := c.Client()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := cl.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var mu sync.Mutex
	masters := 0
	err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		masters++
		mu.Unlock()
		return m.Ping(ctx).Err()
	})
	if err != nil || masters != 3 {
		t.Fatalf("masters: %d, err %v", masters, err)
	}
}
