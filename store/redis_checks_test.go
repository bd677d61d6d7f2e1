package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestCheckRedisPolicy: a master whose maxmemory-policy may evict is an
// *EvictionError naming it, unless eviction is allowed; noeviction passes.
// The version is read, so the store can pick its scripts' form.
func TestCheckRedisPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		allow  bool
		refuse bool
	}{
		{"noeviction", false, false},
		{"volatile-lru", false, true},
		{"allkeys-lru", false, true},
		{"volatile-lru", true, false},
	} {
		t.Run(fmt.Sprintf("%s allow=%v", c.policy, c.allow), func(t *testing.T) {
			rs := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", c.policy}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			rep, err := CheckRedis(ctx, rs.Client(), RedisCheckOptions{AllowEviction: c.allow})
			var ev *EvictionError
			if got := errors.As(err, &ev); got != c.refuse {
				t.Fatalf("refused=%v (%v), want %v", got, err, c.refuse)
			}
			if c.refuse {
				for _, want := range []string{rs.Addr(), "maxmemory-policy " + c.policy, "noeviction", "allow_eviction", "runs the backend a second time"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error does not say %q: %v", want, err)
					}
				}
			}
			if len(rep.Masters) != 1 || rep.Masters[0].Policy != c.policy || rep.Masters[0].MaxMemory != 64<<20 {
				t.Fatalf("report %+v", rep)
			}
			if rep.Major < 6 {
				t.Fatalf("version %d", rep.Major)
			}
		})
	}
}

// TestCheckRedisClusterEveryMaster: on a Cluster every master is read; one
// master set to evict is enough to refuse, and the error names it alone.
func TestCheckRedisClusterEveryMaster(t *testing.T) {
	testenv.Slow(t, "starts a Redis Cluster")
	cl := redistest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := CheckRedis(ctx, cl.Client(), RedisCheckOptions{}); err != nil {
		t.Fatalf("a noeviction cluster: %v", err)
	}
	odd := cl.Addrs[1]
	c := redis.NewClient(&redis.Options{Addr: odd})
	defer c.Close()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckRedis(ctx, cl.Client(), RedisCheckOptions{})
	var ev *EvictionError
	if !errors.As(err, &ev) || len(ev.Masters) != 1 || ev.Masters[0].Addr != odd {
		t.Fatalf("want the one evicting master %s named: %v", odd, err)
	}
	if len(rep.Masters) != 3 {
		t.Fatalf("%d masters checked, want 3", len(rep.Masters))
	}
}

// TestCheckRedisACL: a Redis 7 user made the usual way (no channel rights,
// Redis 7's default for a new user) is a *PermissionError naming the
// channels and the ACL rule; one without EVALSHA names EVALSHA; one
// allowed everything the store needs passes. A user who may not run ACL
// itself is checked by probes, with the same verdicts.
func TestCheckRedisACL(t *testing.T) {
	rs := redistest.Start(t)
	admin := rs.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	users := map[string][]any{
		"usual":     {"on", ">pw", "~*", "+@all"},
		"noevalsha": {"on", ">pw", "~*", "&*", "+@all", "-evalsha"},
		"good":      {"on", ">pw", "~idem:*", "&idem:*", "+@all"},
		"probed":    {"on", ">pw", "~*", "+@all", "-acl"},
		"probedok":  {"on", ">pw", "~idem:*", "&idem:*", "+@all", "-acl"},
		"otherkeys": {"on", ">pw", "~app:*", "&*", "+@all"},
	}
	for u, rules := range users {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", u}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		user string
		want []string // in the error; none: passes
	}{
		{"usual", []string{"PUBLISH on channel idem:", "SUBSCRIBE to channel idem:{idemgate-check}:wake", "&idem:*", "usual"}},
		{"noevalsha", []string{"EVALSHA", "+evalsha"}},
		{"good", nil},
		{"probed", []string{"PUBLISH on channel idem:", "SUBSCRIBE to channel idem:{idemgate-check}:wake", "&idem:*"}},
		{"probedok", nil},
		{"otherkeys", []string{"~idem:*"}},
	} {
		t.Run(c.user, func(t *testing.T) {
			cl := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: c.user, Password: "pw"})
			defer cl.Close()
			_, err := CheckRedis(ctx, cl, RedisCheckOptions{})
			var pe *PermissionError
			if got := errors.As(err, &pe); got != (c.want != nil) {
				t.Fatalf("refused=%v (%v), want %v", got, err, c.want != nil)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q: %v", w, err)
				}
			}
		})
	}
}

// TestPurgeWithoutPublishNamesTheRight: a purge by a user who may not
// publish says which right is missing, not only Redis's NOPERM, and drops
// nothing.
func TestPurgeWithoutPublishNamesTheRight(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	if err := rs.Client().Do(ctx, "ACL", "SETUSER", "gw", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	owner := NewRedis(rs.Client(), RedisOptions{})
	defer owner.Close()
	won, err := owner.Claim(ctx, "generic:k1", "", time.Minute)
	if err != nil || won.Outcome != Won {
		t.Fatal(won, err)
	}
	if err := owner.Complete(ctx, "generic:k1", won.Token, answer, time.Hour, Journal{}); err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: "gw", Password: "pw"})
	defer cl.Close()
	s := NewRedis(cl, RedisOptions{})
	defer s.Close()
	err = s.Delete(ctx, "generic:k1")
	if err == nil || !strings.Contains(err.Error(), "channels &idem:*") || !strings.Contains(err.Error(), "can't publish") {
		t.Fatalf("purge without channel rights: %v", err)
	}
	if rec, err := owner.Lookup(ctx, "generic:k1"); err != nil || rec.State != StateAnswered {
		t.Fatalf("after a refused purge: %+v %v, want the answer kept", rec, err)
	}
}

// TestClaimAtMaxmemory: at noeviction out of memory, a new claim is
// refused (an OOM error: the gateway answers 503) and Redis does not grow
// past maxmemory however many claims arrive, in both script forms (Redis
// 6's, whose first write must be one Redis refuses, and Redis 7's flagged
// scripts). A claim won before memory ran out still settles with the
// flagged scripts (allow-oom): refusing it would leave the answer only in
// the gateway's process.
func TestClaimAtMaxmemory(t *testing.T) {
	for _, flagged := range []bool{false, true} {
		t.Run("flagged="+strconv.FormatBool(flagged), func(t *testing.T) {
			rs := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"}})
			c := rs.Client()
			ctx := context.Background()
			s := NewRedis(c, RedisOptions{})
			defer s.Close()
			if flagged {
				s.UseServerVersion(7)
			}
			early, err := s.Claim(ctx, "generic:early", "", time.Minute)
			if err != nil || early.Outcome != Won {
				t.Fatalf("claim before OOM: %+v %v", early, err)
			}
			// Another tenant fills the server.
			filler := strings.Repeat("x", 16<<10)
			for i := 0; ; i++ {
				if i > 1000 {
					t.Fatal("the server never ran out of memory")
				}
				if err := c.Set(ctx, "tenant:"+strconv.Itoa(i), filler, 0).Err(); err != nil {
					if !strings.Contains(err.Error(), "OOM") {
						t.Fatal(err)
					}
					break
				}
			}
			// The tenant's refused write freed its own query buffer: a few
			// small claims may still fit before Redis is full.
			for i := 0; ; i++ {
				if i > 200 {
					t.Fatal("claims never ran into maxmemory")
				}
				if _, err := s.Claim(ctx, fmt.Sprintf("generic:fill-%d", i), "", time.Minute); err != nil {
					if !strings.Contains(err.Error(), "OOM") {
						t.Fatal(err)
					}
					break
				}
			}
			// Redis is now at its limit, within a claim's few hundred
			// bytes of it. Memory it frees on its own (Lua's garbage
			// collection, every few hundred scripts that pack a record;
			// a client's query buffer shrunk) would dip it under the
			// limit, where a claim rightly fits: the limit goes 128 KiB
			// under what Redis holds, so every claim below meets a server
			// that is past it, as a full one is.
			before := usedMemory(t, c)
			if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(before-128<<10, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 500 {
				_, err := s.Claim(ctx, fmt.Sprintf("generic:oom-%d", i), "", time.Minute)
				if err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("claim %d at maxmemory: %v, want an OOM error", i, err)
				}
			}
			after := usedMemory(t, c)
			t.Logf("500 refused claims: used_memory %d → %d (maxmemory %d)", before, after, before-128<<10)
			if grown := after - before; grown > 64<<10 {
				t.Fatalf("500 refused claims grew Redis by %d bytes (%d → %d)", grown, before, after)
			}
			if n, _ := c.Exists(ctx, s.hashKey("generic:oom-1")).Result(); n != 0 {
				t.Fatal("a refused claim left a record")
			}
			err = s.Complete(ctx, "generic:early", early.Token, Answer{Status: 200, Body: []byte("ok"), BodyCached: true}, time.Hour, Journal{})
			if flagged && err != nil {
				t.Fatalf("settling a claim won before OOM: %v", err)
			}
			if !flagged && (err == nil || !strings.Contains(err.Error(), "OOM")) {
				t.Fatalf("Redis 6 form: settle at OOM: %v, want OOM (the gateway keeps the answer)", err)
			}
		})
	}
}

func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory")
	return 0
}

// TestCheckRedisSentinelMaster: through Sentinel, the master is checked.
func TestCheckRedisSentinelMaster(t *testing.T) {
	testenv.Slow(t, "starts a Sentinel")
	m := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"}})
	sn := redistest.StartSentinel(t, m, "gw")
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{sn.Addr()}, MasterName: "gw"})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := CheckRedis(ctx, c, RedisCheckOptions{})
	var ev *EvictionError
	if !errors.As(err, &ev) || !strings.Contains(err.Error(), "Sentinel master") || ev.Masters[0].Policy != "volatile-lru" {
		t.Fatalf("Sentinel's evicting master: %v", err)
	}
}
