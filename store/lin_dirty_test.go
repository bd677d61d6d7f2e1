package store

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// linLink is a TCP relay for a replication link that can hold the
// master's stream (the replica stays connected but receives nothing, as on
// a slow network) and cut it, dropping what it held.
type linLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	wake  chan struct{}
	conns []net.Conn
}

func startLinLink(t *testing.T, target string) *linLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &linLink{ln: ln, target: target, wake: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); l.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, up)
			l.mu.Unlock()
			go io.Copy(up, c) // replica → master
			go l.relay(c, up) // master → replica, held on demand
		}
	}()
	return l
}

func (l *linLink) relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		for {
			l.mu.Lock()
			held, wake := l.held, l.wake
			l.mu.Unlock()
			if !held {
				break
			}
			<-wake
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			src.Close()
			return
		}
	}
}

func (l *linLink) addr() string { return l.ln.Addr().String() }

func (l *linLink) hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

// cut closes every relayed connection; what was held is never delivered.
func (l *linLink) cut() {
	l.mu.Lock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
	l.held = false
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

// Regression: with WaitReplicas, a lookup was a plain HMGET: it could
// return a claim no replica had yet, and a failover then lost the claim,
// so the record was seen, then gone (found by the Sentinel failover
// history). Lookups now go through WAIT too, behind a fence write, as WAIT
// is documented to wait only for the connection's own writes (Redis 7.0
// in practice also covers what a read saw; the fence does not rely on
// it). Here the replica stays connected while its stream is held back,
// the master is lost, the replica promoted.
func TestLinearizableRedisDirtyRead(t *testing.T) {
	testenv.Slow(t, "fault: a failover that loses a claim")
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t)
	replica := redistest.Start(t)
	link := startLinLink(t, master.Addr())
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	host, port, _ := net.SplitHostPort(link.addr())
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitLinReplica(t, replica.Addr())

	newStore := func(addr string) Store {
		c := redis.NewClient(linClientOpts(addr))
		s := NewRedis(c, RedisOptions{Prefix: "lin", WaitReplicas: 1, WaitTimeout: linWaitTimeout})
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	}
	a, b := newStore(master.Addr()), newStore(master.Addr())
	ls := &linScript{t: t, start: time.Now()}
	// The link works: a claim is confirmed by the replica. Outside the
	// history, and retried on fresh keys for up to 10s: on a loaded
	// machine a replica just in sync may take longer than linWaitTimeout
	// to acknowledge its first write.
	for i, deadline := 0, time.Now().Add(10*time.Second); ; i++ {
		res, err := a.Claim(ctx, fmt.Sprintf("warm%d", i), "", time.Minute)
		if err == nil && res.Outcome == Won {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim with the replica in sync: %+v %v", res, err)
		}
	}

	link.hold()
	first := ls.do(0, a, linIn{Op: opClaim, Key: "paid", TTL: time.Minute})
	read := ls.do(1, b, linIn{Op: opLookup, Key: "paid"})
	link.cut()
	master.Kill()
	if err := rc.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	// The promoted server gets a replica of its own, so WAIT 1 can pass.
	r2 := redistest.Start(t)
	c2 := redis.NewClient(&redis.Options{Addr: r2.Addr()})
	t.Cleanup(func() { c2.Close() })
	if err := c2.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(replicaPort(t, replica.Addr()))).Err(); err != nil {
		t.Fatal(err)
	}
	waitLinReplica(t, r2.Addr())
	after := ls.until(2, newStore(replica.Addr()), linIn{Op: opLookup, Key: "paid"})

	t.Logf("claim %s; lookup on the old master %s; lookup after the failover %s",
		linOutDesc(first), linOutDesc(read), linOutDesc(after))
	if !first.Unknown {
		t.Errorf("claim while the replica lags: %s, want %v", linOutDesc(first), ErrNotReplicated)
	}
	if after.Err != errNotFound {
		t.Fatalf("after the failover: %s, want not found (the claim was lost)", linOutDesc(after))
	}
	if !read.Unknown {
		t.Errorf("lookup of an unreplicated claim: %s, want %v", linOutDesc(read), ErrNotReplicated)
	}
	if res := linCheck(t, "dirty read", ls.h); res != porcupine.Ok {
		t.Errorf("history is %s, want Ok", res)
	}
}

func replicaPort(t *testing.T, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
