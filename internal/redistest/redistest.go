// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port, or a small Cluster. Tests that need Redis
// fail (never skip) when redis-server is missing, so a green run always
// means the Redis code ran.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const installHint = "install it with: apt-get install redis-server"

// Server is one redis-server process on 127.0.0.1, without persistence
// unless started with AOF (StartWith, StartAOF).
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	// wrapper, when set, runs redis-server: its command and arguments.
	wrapper []string

	mu   sync.Mutex
	proc *proc
}

// proc is a running redis-server and the result of its Wait.
type proc struct {
	p      *os.Process
	exited chan error
}

// Start launches redis-server on a free loopback port; t.Cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartUnder(t)
}

// StartUnder launches redis-server as Start does, run by a wrapper (a
// command and its arguments, such as valgrind's; none: Start): for
// measurements of the server itself. The wrapper must keep the server's
// process id (valgrind does); Restart runs it again.
func StartUnder(t testing.TB, wrapper ...string) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir()}
	if len(wrapper) > 0 {
		s.wrapper = append([]string{lookPath(t, wrapper[0])}, wrapper[1:]...)
	}
	var err error
	for range 5 { // a free port may be taken between probe and start
		s.port = freePort(t, false)
		s.args = []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.dir}
		if err = s.start(bin); err == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// PID is the server's process id.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.p.Pid
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Client returns a new client for the server, closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// ScriptCalls is how many scripts (EVALSHA and EVAL) the server has run,
// from INFO commandstats.
func (s *Server) ScriptCalls() int64 {
	s.t.Helper()
	return s.CommandCalls("evalsha", "eval")
}

// CommandCalls is how many times the server has run the named commands
// (lower case, as INFO commandstats names them), inside scripts too.
func (s *Server) CommandCalls(names ...string) int64 {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if strings.HasPrefix(line, "cmdstat_"+name+":calls=") {
				v, _, _ := strings.Cut(line[strings.Index(line, "=")+1:], ",")
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// Stop kills the server (like a crash: nothing is saved). Calling it on a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.p.Kill()
	<-s.proc.exited
	s.proc = nil
}

// Restart stops the server if it runs and starts it again on the same port,
// empty (or, with AOF, with what its AOF kept): for outage and recovery
// tests.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	bin := lookPath(s.t, "redis-server")
	var err error
	for range 20 { // the old socket may linger for a moment
		if err = s.start(bin); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
}

func (s *Server) start(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := s.args
	if len(s.wrapper) > 0 {
		bin, args = s.wrapper[0], append(append(slices.Clip(s.wrapper[1:]), bin), s.args...)
	}
	p, err := launch(bin, s.dir, args, s.Addr())
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// launch starts bin and waits until addr answers PING.
func launch(bin, dir string, args []string, addr string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "redis-"+strings.ReplaceAll(addr, ":", "_")+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pid := serverPID(addr); pid == cmd.Process.Pid {
			return &proc{p: cmd.Process, exited: exited}, nil
		} else if pid != 0 {
			_ = cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("port of %s taken by another redis-server", addr)
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("redis-server exited (%v): %s", err, tail(log))
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil, fmt.Errorf("redis-server on %s did not answer within 10s", addr)
}

// serverPID asks addr for its process id (INFO server): 0 when nothing
// answers yet. Comparing it with the started process tells our server from
// another test's that happened to take the port.
func serverPID(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH; %s", name, installHint)
	}
	return p
}

// freePort returns a loopback port nobody listens on. For cluster nodes the
// bus port (port+10000) must be free too, so those come from a range where
// both fit.
func freePort(t testing.TB, cluster bool) int {
	t.Helper()
	for range 200 {
		if !cluster {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("redistest: no free port: %v", err)
			}
			p := l.Addr().(*net.TCPAddr).Port
			l.Close()
			return p
		}
		p := 20000 + rand.IntN(30000)
		if portFree(p) && portFree(p+10000) {
			return p
		}
	}
	t.Fatalf("redistest: no free port pair for a cluster node")
	return 0
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	// Addrs are the nodes' host:port.
	Addrs []string
	// Servers are the nodes, in Addrs' order (to pause or kill one).
	Servers []*Server
	client  *redis.ClusterClient
}

// Client is a ClusterClient for the cluster, closed at cleanup.
func (c *Cluster) Client() *redis.ClusterClient { return c.client }

// startClusterNode starts one cluster-mode redis-server in dir on a free
// port pair (the node's and its bus port), persisting as opts say (AOF
// and AppendFsync; none by default).
func startClusterNode(t testing.TB, bin, dir string, nodeTimeout time.Duration, opts Options) *Server {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 5 {
		port := freePort(t, true)
		s := &Server{t: t, port: port, dir: dir, args: append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		}, opts.persistArgs()...)}
		if err = s.start(bin); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: starting cluster node: %v", err)
	return nil
}

// StartCluster launches n redis-server nodes in cluster mode (n ≥ 3),
// joins them with redis-cli --cluster create and waits for cluster_state:ok.
// Its nodes keep nothing across a restart.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, Options{})
}

// StartClusterWith is StartCluster whose nodes persist as opts say (AOF
// and AppendFsync; the other options are ignored).
func StartClusterWith(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	dir := t.TempDir()
	c := &Cluster{}
	var servers []*Server
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	for i := range n {
		s := startClusterNode(t, bin, filepath.Join(dir, strconv.Itoa(i)), 5*time.Second, opts)
		servers = append(servers, s)
		c.Addrs = append(c.Addrs, s.Addr())
		c.Servers = append(c.Servers, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range c.Addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				t.Fatalf("redistest: cluster node %s not ok after 30s: %v %s", addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { c.client.Close() })
	// Every node must know every slot before the client's first routing.
	for {
		err := c.client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.Ping(ctx).Err()
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster masters not reachable: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// StartSentinel launches one Redis Sentinel (redis-server --sentinel) that
// monitors master under name, and waits until it knows the master's
// address. It returns the Sentinel as a Server (Addr, Stop).
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	return StartSentinelWith(t, master, name, SentinelOptions{})
}
