package store

import (
	"context"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The Store contract checked for linearizability: recorded histories of
// concurrent operations on every store, with and without faults on real
// processes, checked against the model in lin_model_test.go.
//
// CI runs one short history per store and fault. For a soak run:
//
//	go test ./store -run Linearizable -soak 10m -timeout 0
//
// runs histories back to back for that long per test, and also records
// failover histories without WAIT, logging how many were not
// linearizable. A history that is not linearizable is kept as porcupine's
// HTML visualisation under $IDEMGATE_ARTIFACTS (default: a new directory
// under the system's temporary one); the test log names the file.
var linSoak = flag.Duration("soak", 0, "run the linearizability histories back to back for this long per test (0: one short history)")

var linKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

// linRounds runs round once (CI) or back to back for -soak, each round a
// subtest of its own so its processes are cleaned up before the next.
func linRounds(t *testing.T, round func(t *testing.T)) {
	t.Helper()
	if *linSoak <= 0 {
		round(t)
		return
	}
	deadline := time.Now().Add(*linSoak)
	for i := 0; time.Now().Before(deadline); i++ {
		if !t.Run(fmt.Sprintf("round%d", i), round) {
			return
		}
	}
}

// linExpect records and checks one history and asserts its result; it
// returns the stats. want is porcupine.Ok, or porcupine.Illegal for a run
// built to be non-linearizable.
func linExpect(t *testing.T, name string, r linRun, want porcupine.CheckResult) linStats {
	t.Helper()
	h, st := r.record(t)
	res := linCheck(t, name, h)
	t.Logf("LIN %s: %s; history %s", name, st, res)
	if res != want {
		t.Errorf("%s: history of %d operations is %s, want %s", name, len(h), res, want)
	}
	if st.won == 0 || st.completed == 0 || st.answered == 0 || st.notOwner == 0 || st.lookupsFound == 0 {
		t.Errorf("%s: the history exercised too little: %s", name, st)
	}
	return st
}

func TestLinearizableMemory(t *testing.T) {
	t.Parallel()
	linRounds(t, func(t *testing.T) {
		s := NewMemory()
		t.Cleanup(func() { s.Close() })
		linExpect(t, "memory", linRun{stores: []Store{s}, keys: linKeys, dur: 2 * time.Second,
			pace: 2 * time.Millisecond, tail: time.Millisecond}, porcupine.Ok)
	})
}

func TestLinearizableEmbedded(t *testing.T) {
	t.Parallel()
	linRounds(t, func(t *testing.T) {
		// A fast sweeper and flusher, so both run during the history.
		s, err := NewEmbedded(filepath.Join(t.TempDir(), "lin.db"), EmbeddedOptions{
			SweepInterval: 20 * time.Millisecond, FlushInterval: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		linExpect(t, "embedded", linRun{stores: []Store{s}, keys: linKeys, dur: 2 * time.Second,
			pace: 2 * time.Millisecond, tail: time.Millisecond}, porcupine.Ok)
	})
}

// Client time-outs for the Redis histories: short, so a paused server
// produces time-outs (unknown outcomes) within the run. WAIT's time-out is
// below the read time-out.
const (
	linReadTimeout = 400 * time.Millisecond
	linWaitTimeout = 200 * time.Millisecond
)

func linClientOpts(addr string) *redis.Options {
	return &redis.Options{Addr: addr, DialTimeout: linReadTimeout,
		ReadTimeout: linReadTimeout, WriteTimeout: linReadTimeout}
}

// linRedisPair is two gateway instances: two stores on two clients. The
// first claims a fresh key as a gateway does on Redis 7 (a SET, no script:
// redis_claim.go), the second with the claim script every version reads,
// so a history mixes the two on the same keys.
func linRedisPair(t *testing.T, newClient func() redis.UniversalClient, wait int) []Store {
	o := RedisOptions{Prefix: "lin", WaitReplicas: wait, WaitTimeout: linWaitTimeout}
	var stores []Store
	for i := range 2 {
		c := newClient()
		s := NewRedis(c, o)
		if i == 0 {
			s.UseServerVersion(7)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		stores = append(stores, s)
	}
	return stores
}

func TestLinearizableRedis(t *testing.T) {
	t.Parallel()
	linRounds(t, func(t *testing.T) {
		srv := redistest.Start(t)
		stores := linRedisPair(t, func() redis.UniversalClient { return redis.NewClient(linClientOpts(srv.Addr())) }, 0)
		linExpect(t, "redis", linRun{stores: stores, keys: linKeys, dur: 2 * time.Second,
			pace: time.Millisecond, tail: time.Millisecond}, porcupine.Ok)
	})
}

// A Redis with AOF (fsync always) killed and restarted mid-history keeps
// every acknowledged write.
func TestLinearizableRedisRestartAOF(t *testing.T) {
	testenv.Slow(t, "fault: Redis killed and restarted under a linearizability history")
	t.Parallel()
	linRounds(t, func(t *testing.T) {
		srv := redistest.StartWith(t, redistest.Options{AOF: true})
		stores := linRedisPair(t, func() redis.UniversalClient { return redis.NewClient(linClientOpts(srv.Addr())) }, 0)
		st := linExpect(t, "redis restart (AOF)", linRun{stores: stores, keys: linKeys, dur: 2 * time.Second,
			pace: time.Millisecond, fault: func() {
				srv.Kill()
				srv.Restart()
			}}, porcupine.Ok)
		// go-redis retries what the restart broke on a new connection, so
		// the operations caught in it mostly succeed late rather than fail.
		if st.duringFault == 0 {
			t.Errorf("no operation ran across the restart: %s", st)
		}
	})
}

// A Redis paused with SIGSTOP past the clients' time-out: the operations
// that time out are unknown and may still run when it resumes.
func TestLinearizableRedisPause(t *testing.T) {
	testenv.Slow(t, "fault: Redis paused under a linearizability history")
	t.Parallel()
	linRounds(t, func(t *testing.T) {
		srv := redistest.Start(t)
		stores := linRedisPair(t, func() redis.UniversalClient { return redis.NewClient(linClientOpts(srv.Addr())) }, 0)
		st := linExpect(t, "redis pause", linRun{stores: stores, keys: linKeys, dur: 2 * time.Second,
			pace: time.Millisecond, fault: func() {
				srv.Pause()
				time.Sleep(3 * linReadTimeout) // the fault's length, not a wait for an event
				srv.Resume()
			}}, porcupine.Ok)
		if st.unknown == 0 {
			t.Errorf("the pause produced no time-out: %s", st)
		}
	})
}

// linSentinel is a master with one replica watched by one Sentinel.
type linSentinel struct {
	master, replica, sentinel *redistest.Server
}

const linMasterName = "lin"

func startLinSentinel(t *testing.T) linSentinel {
	m := redistest.StartWith(t, redistest.Options{})
	r := redistest.StartWith(t, redistest.Options{ReplicaOf: m})
	s := redistest.StartSentinelWith(t, m, linMasterName, redistest.SentinelOptions{DownAfter: 2 * time.Second})
	return linSentinel{m, r, s}
}

func (ls linSentinel) client() redis.UniversalClient {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: linMasterName,
		SentinelAddrs: []string{ls.sentinel.Addr()}, DialTimeout: linReadTimeout,
		ReadTimeout: linReadTimeout, WriteTimeout: linReadTimeout})
}

// failover fails the master over to the replica, and waits until the old
// master follows the new one: from then on WAIT 1 is satisfied again.
// Sentinel makes it a replica itself within ~15s (its INFO period); with
// rejoin the test does it at once.
func (ls linSentinel) failover(t *testing.T, rejoin bool) {
	newMaster := redistest.Failover(t, ls.sentinel, linMasterName, ls.master.Addr())
	if rejoin {
		c := redis.NewClient(&redis.Options{Addr: ls.master.Addr()})
		host, port, _ := net.SplitHostPort(newMaster)
		if err := c.ReplicaOf(context.Background(), host, port).Err(); err != nil {
			t.Errorf("REPLICAOF on the old master: %v", err)
		}
		c.Close()
	}
	waitLinReplica(t, ls.master.Addr())
}

// waitLinReplica waits until the server at addr is an in-sync replica.
func waitLinReplica(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s never became an in-sync replica: %v %s", addr, err, info)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Sentinel failover (SENTINEL FAILOVER while both servers run) in the
// middle of a history. Replication is asynchronous, so without WAIT the
// failover may lose acknowledged writes (and the two servers both accept
// writes until the old master is reconfigured); with WaitReplicas 1 the
// history must be linearizable. Soak runs also record histories without
// WAIT and report how many of them were not linearizable.
func TestLinearizableSentinelFailover(t *testing.T) {
	testenv.Slow(t, "fault: a Sentinel failover under a linearizability history")
	t.Parallel()
	var noWait, noWaitIllegal, round int
	linRounds(t, func(t *testing.T) {
		defer func() { round++ }()
		run := func(wait int) ([]porcupine.Operation, linStats, linRun) {
			ls := startLinSentinel(t)
			stores := linRedisPair(t, ls.client, wait)
			r := linRun{stores: stores, keys: linKeys, dur: 2 * time.Second, pace: time.Millisecond,
				// Soak runs let Sentinel bring the old master back every
				// other round, the old master taking writes all along.
				fault: func() { ls.failover(t, round%2 == 0) }}
			h, st := r.record(t)
			return h, st, r
		}
		h, st, _ := run(1)
		res := linCheck(t, "sentinel failover (WAIT 1)", h)
		t.Logf("LIN sentinel failover (WAIT 1): %s; history %s", st, res)
		if res != porcupine.Ok {
			t.Errorf("sentinel failover with WAIT 1: history is %s, want Ok", res)
		}
		if st.won == 0 || st.completed == 0 || st.unknown == 0 {
			t.Errorf("the history exercised too little: %s", st)
		}
		if *linSoak > 0 {
			h, st, _ := run(0)
			res := linCheck(t, "sentinel failover (no WAIT)", h)
			t.Logf("LIN sentinel failover (no WAIT): %s; history %s", st, res)
			noWait++
			if res == porcupine.Illegal {
				noWaitIllegal++
			}
		}
	})
	if noWait > 0 {
		t.Logf("LIN sentinel failover without WAIT: %d of %d histories not linearizable", noWaitIllegal, noWait)
	}
}

// A Cluster slot's master killed mid-history, its replica promoted, the old
// master back as a replica. With WaitReplicas 1 the history must be
// linearizable; soak runs also report histories without WAIT.
func TestLinearizableClusterFailover(t *testing.T) {
	testenv.Slow(t, "fault: a Cluster failover under a linearizability history")
	t.Parallel()
	var noWait, noWaitIllegal int
	linRounds(t, func(t *testing.T) {
		run := func(wait int) ([]porcupine.Operation, linStats) {
			c := redistest.StartClusterWithReplicas(t, 3, 2*time.Second)
			stores := linRedisPair(t, func() redis.UniversalClient {
				return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, DialTimeout: linReadTimeout,
					ReadTimeout: linReadTimeout, WriteTimeout: linReadTimeout})
			}, wait)
			r := linRun{stores: stores, keys: linKeys, dur: 2 * time.Second, pace: time.Millisecond,
				fault: func() {
					old, _ := c.KillMasterOf("lin:{" + linKeys[0] + "}")
					c.Rejoin(old)
				}}
			return r.record(t)
		}
		h, st := run(1)
		res := linCheck(t, "cluster failover (WAIT 1)", h)
		t.Logf("LIN cluster failover (WAIT 1): %s; history %s", st, res)
		if res != porcupine.Ok {
			t.Errorf("cluster failover with WAIT 1: history is %s, want Ok", res)
		}
		if st.won == 0 || st.completed == 0 || st.unknown == 0 {
			t.Errorf("the history exercised too little: %s", st)
		}
		if *linSoak > 0 {
			h, st := run(0)
			res := linCheck(t, "cluster failover (no WAIT)", h)
			t.Logf("LIN cluster failover (no WAIT): %s; history %s", st, res)
			noWait++
			if res == porcupine.Illegal {
				noWaitIllegal++
			}
		}
	})
	if noWait > 0 {
		t.Logf("LIN cluster failover without WAIT: %d of %d histories not linearizable", noWaitIllegal, noWait)
	}
}

// linScript records operations run one after another by the test itself.
type linScript struct {
	t     *testing.T
	start time.Time
	h     []porcupine.Operation
}

func (s *linScript) do(client int, store Store, in linIn) linOut {
	in, out := linDo(store, in, 2*time.Second, func() int64 { return int64(time.Since(s.start)) })
	ret := in.Ret
	if out.Unknown {
		ret, in.Ret = linNever, linNever
	}
	s.h = append(s.h, porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: ret})
	return out
}

// until repeats in until the store answers (errors are recorded as unknown
// outcomes): the client finding the new master after a failover.
func (s *linScript) until(client int, store Store, in linIn) linOut {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := s.do(client, store, in)
		if !out.Unknown {
			return out
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s never answered: %s", in.Op, out.Detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killReplicaLink cuts the replication link (the replica, paused, cannot
// reconnect): what the master acknowledges from now on exists only there.
func killReplicaLink(t *testing.T, master string) {
	c := redis.NewClient(&redis.Options{Addr: master})
	defer c.Close()
	if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica on %s: %v", master, err)
	}
}

// The deliberately unfavourable failover: a claim acknowledged by the
// master while its replica lags, the master lost, the replica promoted,
// and another gateway claiming the key. Without WAIT both win (the checker
// must find it); with WaitReplicas 1 the first claim fails (outcome
// unknown) and the history is linearizable.
func TestLinearizableLostClaimSentinel(t *testing.T) {
	testenv.Slow(t, "fault: a master lost under Sentinel, its replica promoted")
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait%d", wait), func(t *testing.T) {
			t.Parallel()
			ls := startLinSentinel(t)
			stores := linRedisPair(t, ls.client, wait)
			a, b := stores[0], stores[1]
			s := &linScript{t: t, start: time.Now()}
			claim := linIn{Op: opClaim, Key: "paid", TTL: time.Minute}

			ls.replica.Pause()
			killReplicaLink(t, ls.master.Addr())
			first := s.do(0, a, claim)
			ls.master.Kill()
			ls.replica.Resume()
			redistest.Failover(t, ls.sentinel, linMasterName, ls.master.Addr())
			// A new replica for the promoted server, so WAIT 1 can succeed.
			redistest.StartWith(t, redistest.Options{ReplicaOf: ls.replica})
			second := s.until(1, b, claim)
			s.do(1, b, linIn{Op: opLookup, Key: "paid"})
			linLostClaimVerdict(t, "sentinel", wait, s.h, first, second)
		})
	}
}

// The same on a Cluster: the slot's master acknowledges a claim its
// replica never got, is killed, the replica takes over.
func TestLinearizableLostClaimCluster(t *testing.T) {
	testenv.Slow(t, "fault: a Cluster master lost, its replica promoted")
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait%d", wait), func(t *testing.T) {
			t.Parallel()
			c := redistest.StartClusterWithReplicas(t, 3, 2*time.Second)
			stores := linRedisPair(t, func() redis.UniversalClient {
				return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, DialTimeout: linReadTimeout,
					ReadTimeout: linReadTimeout, WriteTimeout: linReadTimeout})
			}, wait)
			a, b := stores[0], stores[1]
			s := &linScript{t: t, start: time.Now()}
			claim := linIn{Op: opClaim, Key: "paid", TTL: time.Minute}
			master := c.MasterFor("lin:{paid}")
			replica := c.ReplicaOf(master)

			c.Node(replica).Pause()
			killReplicaLink(t, master)
			first := s.do(0, a, claim)
			c.Node(master).Kill()
			c.Node(replica).Resume()
			c.Promote(replica)
			c.Rejoin(master) // back as the new master's replica: WAIT 1 can succeed
			second := s.until(1, b, claim)
			s.do(1, b, linIn{Op: opLookup, Key: "paid"})
			linLostClaimVerdict(t, "cluster", wait, s.h, first, second)
		})
	}
}

func linLostClaimVerdict(t *testing.T, name string, wait int, h []porcupine.Operation, first, second linOut) {
	t.Helper()
	res := linCheck(t, fmt.Sprintf("lost claim %s wait%d", name, wait), h)
	t.Logf("LIN lost claim on %s, WAIT %d: first claim %s, second %s; %d operations, history %s",
		name, wait, linOutDesc(first), linOutDesc(second), len(h), res)
	// With WAIT the second gateway's own earlier tries may have claimed
	// the key unacknowledged (no replica yet): its later try then finds
	// its own claim in flight. The checker judges that history.
	if second.Outcome != Won && (wait == 0 || second.Outcome != InFlight) {
		t.Errorf("the second gateway's claim after the failover: %s, want won (the claim was lost)", linOutDesc(second))
	}
	if wait == 0 {
		if first.Outcome != Won {
			t.Errorf("first claim: %s, want won", linOutDesc(first))
		}
		if res != porcupine.Illegal {
			t.Errorf("two acknowledged winners of one key: checker says %s, want Illegal", res)
		}
		return
	}
	if !first.Unknown || !strings.Contains(first.Detail, ErrNotReplicated.Error()) {
		t.Errorf("first claim with WAIT 1 and no replica: %s, want %v", linOutDesc(first), ErrNotReplicated)
	}
	if res != porcupine.Ok {
		t.Errorf("with WAIT 1 the history is %s, want Ok", res)
	}
}

func linOutDesc(o linOut) string {
	switch {
	case o.Unknown:
		return "unknown (" + o.Detail + ")"
	case o.Err != errNone:
		return fmt.Sprint("error ", o.Err)
	}
	return o.Outcome.String()
}
