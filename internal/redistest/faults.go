package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options change how StartWith launches a server.
type Options struct {
	// AOF turns on the append-only file, with fsync on every write unless
	// AppendFsync says otherwise, so a killed and restarted server comes
	// back with every acknowledged write (what a production store with
	// persistence promises).
	AOF bool
	// AppendFsync, with AOF, is appendfsync: "always" (the default),
	// "everysec" or "no". A killed redis-server loses no acknowledged
	// write with any of them (Redis writes the AOF before it answers);
	// they differ on a crash of the host.
	AppendFsync string
	// ReplicaOf makes the server a replica of that master.
	ReplicaOf *Server
	// Args are more redis-server arguments ("--maxmemory", "2mb", …).
	Args []string
}

// StartWith launches redis-server like Start, with opts.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir()}
	var err error
	for range 5 {
		s.port = freePort(t, false)
		s.args = []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--dir", s.dir}
		s.args = append(s.args, opts.persistArgs()...)
		s.args = append(s.args, opts.Args...)
		if m := opts.ReplicaOf; m != nil {
			host, port, _ := net.SplitHostPort(m.Addr())
			s.args = append(s.args, "--replicaof", host, port)
		}
		if err = s.start(bin); err == nil {
			t.Cleanup(s.Stop)
			if opts.ReplicaOf != nil {
				s.waitReplicaSynced()
			}
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// StartAOF launches redis-server as a gateway's Redis runs in production:
// AOF on, fsync every second. An async route needs AOF (without it the
// gateway refuses the route unless it writes durability volatile); tests
// that do not kill the host lose nothing to everysec.
func StartAOF(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{AOF: true, AppendFsync: "everysec"})
}

// persistArgs are the redis-server arguments for opts' persistence.
func (opts Options) persistArgs() []string {
	if !opts.AOF {
		return []string{"--appendonly", "no"}
	}
	f := opts.AppendFsync
	if f == "" {
		f = "always"
	}
	return []string{"--appendonly", "yes", "--appendfsync", f}
}

// waitReplicaSynced waits until the replica reports its link to the master up.
func (s *Server) waitReplicaSynced() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: replica %s never synced: %v %s", s.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL, like a crash; with AOF (fsync always) every
// acknowledged write survives a Restart. Same as Stop.
func (s *Server) Kill() { s.Stop() }

// Pause stops the process with SIGSTOP: connections stay open and nothing
// answers, like a server stuck in a long fork or a frozen VM.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Resumer returns a Resume that signals once however often it is called
// (by a timer, by the test, and by the test's cleanup, which it joins: a
// test that fails while the server is paused leaves it running).
func (s *Server) Resumer() func() {
	var once sync.Once
	resume := func() { once.Do(s.Resume) }
	s.t.Cleanup(resume)
	return resume
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("redistest: %s is not running", s.Addr())
	}
	if err := s.proc.p.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v to %s: %v", sig, s.Addr(), err)
	}
}

// Dir is the server's working directory (AOF and RDB files live there).
func (s *Server) Dir() string { return s.dir }

// SentinelOptions tune StartSentinelWith.
type SentinelOptions struct {
	// DownAfter is how long the master must be unreachable before the
	// Sentinel fails it over. Default 5s.
	DownAfter time.Duration
}

// StartSentinelWith is StartSentinel with options (a short DownAfter for
// failover tests).
func StartSentinelWith(t testing.TB, master *Server, name string, opts SentinelOptions) *Server {
	t.Helper()
	if opts.DownAfter <= 0 {
		opts.DownAfter = 5 * time.Second
	}
	bin := lookPath(t, "redis-server")
	dir := t.TempDir()
	host, port, _ := net.SplitHostPort(master.Addr())
	var err error
	for range 5 {
		s := &Server{t: t, port: freePort(t, false), dir: dir}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
			s.port, dir, name, host, port, name, opts.DownAfter.Milliseconds(), name)
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
		if err = s.start(bin); err != nil {
			continue
		}
		t.Cleanup(s.Stop)
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		defer sc.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			addr, err := sc.GetMasterAddrByName(context.Background(), name).Result()
			if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == master.Addr() {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel never reported master %s: %v %v", name, addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatalf("redistest: starting redis sentinel: %v", err)
	return nil
}

// Failover asks the Sentinel to fail name over now (SENTINEL FAILOVER) and
// waits until it reports a master other than from, which it returns.
func Failover(t testing.TB, sentinel *Server, name, from string) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer sc.Close()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := sc.Failover(ctx, name).Err()
		if err == nil {
			break
		}
		// Sentinel refuses while it has not yet discovered the replicas.
		if time.Now().After(deadline) {
			t.Fatalf("redistest: SENTINEL FAILOVER %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		addr, err := sc.GetMasterAddrByName(ctx, name).Result()
		if err == nil && len(addr) == 2 {
			if a := net.JoinHostPort(addr[0], addr[1]); a != from {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel never moved %s off %s: %v %v", name, from, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
