package redistest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCluster is a Redis Cluster whose masters each have one replica,
// for failover tests: kill a slot's master, promote its replica, bring the
// old master back as the new master's replica.
type ReplicatedCluster struct {
	// Addrs are every node's host:port, masters and replicas.
	Addrs  []string
	t      testing.TB
	nodes  map[string]*Server
	client *redis.ClusterClient
}

// StartClusterWithReplicas launches 2×masters redis-server nodes (masters ≥
// 3) without persistence, joins them with one replica per master, and waits
// until the cluster is ok and every replica is in sync. nodeTimeout is the
// cluster-node-timeout (how long before a silent node is marked failing).
func StartClusterWithReplicas(t testing.TB, masters int, nodeTimeout time.Duration) *ReplicatedCluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	if nodeTimeout <= 0 {
		nodeTimeout = 5 * time.Second
	}
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	dir := t.TempDir()
	c := &ReplicatedCluster{t: t, nodes: make(map[string]*Server)}
	t.Cleanup(func() {
		for _, s := range c.nodes {
			s.Stop()
		}
	})
	for i := range 2 * masters {
		s := startClusterNode(t, bin, filepath.Join(dir, strconv.Itoa(i)), nodeTimeout, Options{})
		c.nodes[s.Addr()] = s
		c.Addrs = append(c.Addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	c.waitOK(c.Addrs, deadline)
	for _, n := range c.parseNodes(c.Addrs[0]) {
		if n.replica {
			c.waitReplica(n.addr, deadline)
		}
	}
	c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { c.client.Close() })
	return c
}

// Client is a ClusterClient for the cluster, closed at cleanup.
func (c *ReplicatedCluster) Client() *redis.ClusterClient { return c.client }

// Node is the node at addr (Pause, Resume, Kill, Restart).
func (c *ReplicatedCluster) Node(addr string) *Server {
	s := c.nodes[addr]
	if s == nil {
		c.t.Fatalf("redistest: no cluster node %s", addr)
	}
	return s
}

type clusterNode struct {
	id, addr, masterID string
	replica, failed    bool
}

// parseNodes reads CLUSTER NODES as seen by addr.
func (c *ReplicatedCluster) parseNodes(addr string) []clusterNode {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	text, err := cl.ClusterNodes(context.Background()).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER NODES on %s: %v", addr, err)
	}
	var ns []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		ns = append(ns, clusterNode{
			id: f[0], addr: a, masterID: f[3],
			replica: strings.Contains(f[2], "slave"),
			failed:  strings.Contains(f[2], "fail"),
		})
	}
	return ns
}

// MasterFor is the address of the master that serves key's slot, as a
// fresh client sees it.
func (c *ReplicatedCluster) MasterFor(key string) string {
	c.t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.live()})
	defer cc.Close()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		c.t.Fatalf("redistest: master for %q: %v", key, err)
	}
	return m.Options().Addr
}

// ReplicaOf is the address of master's replica (as master sees it; a
// node may take a moment to learn its replica's role after the create).
func (c *ReplicatedCluster) ReplicaOf(master string) string {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ns := c.parseNodes(master)
		var id string
		for _, n := range ns {
			if n.addr == master {
				id = n.id
			}
		}
		for _, n := range ns {
			if n.replica && n.masterID == id && !n.failed {
				return n.addr
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s has no replica", master)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// live lists the nodes whose process runs.
func (c *ReplicatedCluster) live() []string {
	var as []string
	for _, a := range c.Addrs {
		s := c.nodes[a]
		s.mu.Lock()
		if s.proc != nil {
			as = append(as, a)
		}
		s.mu.Unlock()
	}
	return as
}

// Promote makes replica the master of its slots at once (CLUSTER FAILOVER
// TAKEOVER: no agreement with a master that may be dead) and waits until
// every running node sees it as a master and reports cluster_state:ok.
func (c *ReplicatedCluster) Promote(replica string) {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: replica})
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		c.t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", replica, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := true
		for _, a := range c.live() {
			for _, n := range c.parseNodes(a) {
				if n.addr == replica && n.replica {
					done = false
				}
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s never became master everywhere", replica)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitOK(c.live(), deadline)
}

// KillMasterOf kills (SIGKILL, no persistence: its data is gone) the master
// serving key, promotes its replica and returns both addresses.
func (c *ReplicatedCluster) KillMasterOf(key string) (oldMaster, newMaster string) {
	c.t.Helper()
	oldMaster = c.MasterFor(key)
	newMaster = c.ReplicaOf(oldMaster)
	c.Node(oldMaster).Kill()
	c.Promote(newMaster)
	return oldMaster, newMaster
}

// Rejoin restarts a killed node (empty, same port and nodes.conf): it
// learns it lost its slots and comes back as a replica; Rejoin waits until
// it is in sync with its master.
func (c *ReplicatedCluster) Rejoin(addr string) {
	c.t.Helper()
	c.Node(addr).Restart()
	c.waitReplica(addr, time.Now().Add(30*time.Second))
}

func (c *ReplicatedCluster) waitOK(addrs []string, deadline time.Time) {
	c.t.Helper()
	ctx := context.Background()
	for _, addr := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				c.t.Fatalf("redistest: cluster node %s not ok: %v %s", addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cl.Close()
	}
}

// waitReplica waits until addr is a replica whose link to its master is up.
func (c *ReplicatedCluster) waitReplica(addr string, deadline time.Time) {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	for {
		info, err := cl.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") &&
			strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s never became an in-sync replica: %v %s", addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
