package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// replyDropper dials real connections and, when armed, lets the server
// answer the next script call (EVALSHA) and then breaks its connection
// before the client reads the answer: the script ran, the client sees EOF.
// The arm is taken by the connection that writes the script, so a new
// connection's handshake, or a read already waiting on a pipelining
// client's connection, does not take it.
type replyDropper struct {
	armed atomic.Int32
	also  []byte // another write that takes the arm (lower case), or nil
}

func (d *replyDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &droppingConn{Conn: c, d: d}, nil
}

type droppingConn struct {
	net.Conn
	d    *replyDropper
	drop atomic.Bool
}

func (c *droppingConn) Write(p []byte) (int, error) {
	lp := bytes.ToLower(p)
	if (bytes.Contains(lp, []byte("evalsha")) || c.d.also != nil && bytes.Contains(lp, c.d.also)) && c.d.armed.CompareAndSwap(1, 0) {
		c.drop.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *droppingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.drop.Load() {
		// The server answered (so the script surely ran): drop it.
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

// Regression: go-redis re-sent a write script whose answer was lost with
// its connection, so the script ran twice. Found by the restart history
// (a conflict counted twice); here a lost answer is provoked on purpose
// for each write, and each must have run exactly once, with the history
// linearizable.
func TestLinearizableRedisScriptNotResent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d := &replyDropper{}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: d.dial, PoolSize: 1})
	s := NewRedis(c, RedisOptions{Prefix: "lin"})
	t.Cleanup(func() { s.Close(); c.Close() })
	ls := &linScript{t: t, start: time.Now()}

	// Load the scripts first, so the dropped answer is the script's own
	// (not a NOSCRIPT that go-redis answers with EVAL).
	won := ls.do(0, s, linIn{Op: opClaim, Key: "warm", TTL: time.Minute})
	ls.do(0, s, linIn{Op: opRenew, Key: "warm", Token: won.Token, TTL: time.Minute})
	ls.do(0, s, linIn{Op: opComplete, Key: "warm", Token: won.Token, Status: 200, TTL: time.Minute})
	ls.do(0, s, linIn{Op: opDelete, Key: "warm"})
	ls.do(0, s, linIn{Op: opClaim, Key: "warm2", TTL: time.Minute})
	w2 := ls.do(0, s, linIn{Op: opClaim, Key: "warm3", TTL: time.Minute})
	ls.do(0, s, linIn{Op: opRelease, Key: "warm3", Token: w2.Token})

	dropped := func(in linIn) linOut {
		t.Helper()
		d.armed.Store(1)
		out := ls.do(0, s, in)
		if d.armed.Load() != 0 {
			t.Fatalf("%s: the answer was not dropped", in.Op)
		}
		if !out.Unknown {
			t.Errorf("%s whose answer was lost: %s, want an error (outcome unknown)", in.Op, linOutDesc(out))
		}
		return out
	}
	lookup := func(want int64) {
		t.Helper()
		out := ls.do(0, s, linIn{Op: opLookup, Key: "paid"})
		if !out.Found || out.Copies != want {
			t.Errorf("lookup: %+v, want a record with %d copies (each claim ran once)", out, want)
		}
	}

	// A claim that won, answer lost: it ran once (copies 1), nobody holds
	// the token, and a retry by the caller finds it in flight.
	dropped(linIn{Op: opClaim, Key: "paid", FP: "A", TTL: time.Minute})
	lookup(1)
	// A counted copy, answer lost: counted once.
	dropped(linIn{Op: opClaim, Key: "paid", FP: "A", TTL: time.Minute})
	lookup(2)
	// A conflict, answer lost: counted once.
	dropped(linIn{Op: opClaim, Key: "paid", FP: "B", TTL: time.Minute})
	if out := ls.do(0, s, linIn{Op: opLookup, Key: "paid"}); out.Conflicts != 1 {
		t.Errorf("conflicts after one lost conflict: %d, want 1", out.Conflicts)
	}
	// Complete and release by an owner whose answer is lost.
	ls.do(0, s, linIn{Op: opDelete, Key: "paid"})
	own := ls.do(0, s, linIn{Op: opClaim, Key: "paid", TTL: time.Minute})
	dropped(linIn{Op: opComplete, Key: "paid", Token: own.Token, Status: 201, TTL: time.Minute})
	lookup(1)
	ls.do(0, s, linIn{Op: opDelete, Key: "paid"})
	own = ls.do(0, s, linIn{Op: opClaim, Key: "paid", TTL: time.Minute})
	dropped(linIn{Op: opRelease, Key: "paid", Token: own.Token})
	if out := ls.do(0, s, linIn{Op: opLookup, Key: "paid"}); out.Err != errNotFound {
		t.Errorf("lookup after a lost release: %s, want not found", linOutDesc(out))
	}
	// A read is not a write: go-redis may re-send it, and does.
	ls.do(0, s, linIn{Op: opClaim, Key: "paid", TTL: time.Minute})
	d.armed.Store(1)
	if out := ls.do(0, s, linIn{Op: opLookup, Key: "paid"}); out.Unknown || !out.Found {
		t.Errorf("lookup whose answer was lost: %s, want re-sent and found", linOutDesc(out))
	}

	if res := linCheck(t, "script not re-sent", ls.h); res != porcupine.Ok {
		t.Errorf("history of %d operations is %s, want Ok", len(ls.h), res)
	}
}

// With WaitReplicas on a Cluster nobody answers for, every call is a store
// error (it once dereferenced a command never queued).
func TestLinearizableRedisWaitNoCluster(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	s := NewRedis(c, RedisOptions{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { s.Close(); c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, "k", "", time.Minute); err == nil {
		t.Error("Claim without a server succeeded")
	}
	if err := s.Release(ctx, "k", "t", time.Hour, Journal{}); err == nil || errors.Is(err, ErrNotOwner) {
		t.Errorf("Release without a server: %v, want a store error", err)
	}
	if _, err := s.Lookup(ctx, "k"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup without a server: %v, want a store error", err)
	}
}

// The same for a claim that is a SET (redis_claim.go): a first copy whose
// answer was lost with its connection claimed once, and is not re-sent
// (a re-sent SET NX GET would hand back the claim's own record, and the
// caller would wait on itself).
func TestLinearizableRedisSetClaimNotResent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d := &replyDropper{also: []byte("$3\r\nset\r\n")}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: d.dial, PoolSize: 1})
	s := NewRedis(c, RedisOptions{Prefix: "lin"})
	s.UseServerVersion(7)
	t.Cleanup(func() { s.Close(); c.Close() })
	ls := &linScript{t: t, start: time.Now()}
	ls.do(0, s, linIn{Op: opClaim, Key: "warm", TTL: time.Minute})
	ls.do(0, s, linIn{Op: opClaim, Key: "warm", TTL: time.Minute}) // loads the claim script

	sets := srv.CommandCalls("set")
	d.armed.Store(1)
	out := ls.do(0, s, linIn{Op: opClaim, Key: "paid", FP: "A", TTL: time.Minute})
	if d.armed.Load() != 0 {
		t.Fatal("the claim's answer was not dropped")
	}
	if !out.Unknown {
		t.Errorf("claim whose answer was lost: %s, want an error (outcome unknown)", linOutDesc(out))
	}
	if got := srv.CommandCalls("set") - sets; got != 1 {
		t.Errorf("the claim's SET ran %d times, want 1", got)
	}
	if out := ls.do(0, s, linIn{Op: opLookup, Key: "paid"}); !out.Found || out.Copies != 1 {
		t.Errorf("lookup: %s, want a record with 1 copy", linOutDesc(out))
	}
	// A retry by the caller finds it in flight, counted as a second copy.
	if out := ls.do(0, s, linIn{Op: opClaim, Key: "paid", FP: "A", TTL: time.Minute}); out.Outcome != InFlight {
		t.Errorf("the caller's retry: %s, want in flight", linOutDesc(out))
	}
	if res := linCheck(t, "set claim not re-sent", ls.h); res != porcupine.Ok {
		t.Errorf("history of %d operations is %s, want Ok", len(ls.h), res)
	}
}
