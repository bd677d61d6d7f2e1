package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// evalScripter is a redis.Scripter whose four evals go through one send
// function (onceScripter's and batchedScripter's); SCRIPT EXISTS and
// LOAD go to c unchanged.
type evalScripter struct {
	c    redis.Scripter
	send func(ctx context.Context, cmd *redis.Cmd) *redis.Cmd
}

// evalCmd builds EVAL-like name (a constant: in an interface it costs no
// allocation) with payload, keys and args as one command (the first key at
// position 3, for Cluster routing).
func evalCmd(ctx context.Context, name any, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for i := range keys {
		// A *string into keys rather than a string: go-redis writes both,
		// and reads both where it routes by the first key (Cluster), while
		// a string in an interface costs an allocation (9 of a first
		// copy's ~165).
		a = append(a, &keys[i])
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

func (e evalScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return e.send(ctx, evalCmd(ctx, "eval", script, keys, args))
}

func (e evalScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return e.send(ctx, evalCmd(ctx, "evalsha", sha1, keys, args))
}

func (e evalScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return e.send(ctx, evalCmd(ctx, "eval_ro", script, keys, args))
}

func (e evalScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return e.send(ctx, evalCmd(ctx, "evalsha_ro", sha1, keys, args))
}

func (e evalScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return e.c.ScriptExists(ctx, hashes...)
}

func (e evalScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return e.c.ScriptLoad(ctx, script)
}

// processor is a client or pipeline that runs one command.
type processor interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceScripter sends EVAL and EVALSHA as commands go-redis never re-sends
// (see run).
func onceScripter(c processor) redis.Scripter {
	return evalScripter{c: c, send: func(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
		_ = c.Process(ctx, onceCmd{cmd})
		return cmd
	}}
}

type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// ErrNotReplicated: a write was not acknowledged by RedisOptions.WaitReplicas
// replicas in time. It may or may not have been applied, and may be lost in
// a failover: callers treat it like any other store error.
var ErrNotReplicated = errors.New("store: redis write not acknowledged by enough replicas")

// run runs a write script on key's hash. go-redis re-sends a command whose
// connection broke after it was written; a script that may already have run
// must not run twice (a claim would find its own claim in flight, a
// conflict or copy would count twice, a complete would find the key
// answered and report a lost claim), so scripts go out as commands
// go-redis never re-sends: a broken connection is an error, the outcome
// unknown. With WaitReplicas the script runs inside replicated.
func (s *Redis) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	hkey := keys[0]
	if s.opts.WaitReplicas <= 0 {
		return sc.Run(ctx, s.pathFor(ctx, hkey).scripter, keys, args...)
	}
	exec := func(load bool) *redis.Cmd {
		var cmd *redis.Cmd
		err := s.replicated(ctx, hkey, func(p redis.Pipeliner) redis.Cmder {
			if load {
				cmd = sc.Eval(ctx, onceScripter(p), keys, args...)
			} else {
				cmd = sc.EvalSha(ctx, onceScripter(p), keys, args...)
			}
			return cmd
		})
		if cmd == nil { // no server to send it to
			cmd = redis.NewCmd(ctx)
		}
		if err != nil {
			cmd.SetErr(err)
		}
		return cmd
	}
	cmd := exec(false)
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		cmd = exec(true)
	}
	return cmd
}

// replicated sends the command queue adds, a fence and WAIT in one
// pipeline (one connection) to the server holding hkey — on a Cluster the
// key's master, as a keyless WAIT would go to any node — and returns
// ErrNotReplicated unless WaitReplicas replicas acknowledged it all. The
// fence (a string beside the hash, gone after 1ms) is a write every time:
// WAIT waits for the connection's own last write, and a command that
// wrote nothing (a lookup, a not-owner answer) may still have read a
// write that is not replicated yet. When the command itself failed, that
// error is left on it and replicated returns nil; when no server holds
// hkey, queue is not called.
func (s *Redis) replicated(ctx context.Context, hkey string, queue func(p redis.Pipeliner) redis.Cmder) error {
	var c redis.Cmdable = s.c
	cc, cluster := s.c.(*redis.ClusterClient)
	if cluster {
		node, err := cc.MasterForKey(ctx, hkey)
		if err != nil {
			return err
		}
		c = node
	}
	pipe := c.Pipeline()
	cmd := queue(pipe)
	fence := pipe.Set(ctx, hkey+":fence", 1, time.Millisecond)
	wait := pipe.Do(ctx, "WAIT", s.opts.WaitReplicas, ms(s.opts.WaitTimeout))
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		if cluster {
			cc.ReloadState(ctx) // MOVED or a dead node: route afresh next time
		}
		return nil
	}
	if err := fence.Err(); err != nil {
		return err
	}
	n, err := wait.Int64()
	if err == nil && n < int64(s.opts.WaitReplicas) {
		err = fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.opts.WaitReplicas, s.opts.WaitTimeout)
	}
	return err
}

// batchPath is where write commands go: a Batcher, and the scripter that
// sends scripts through it.
type batchPath struct {
	batch    *Batcher
	scripter redis.Scripter
}

func newBatchPath(c redis.UniversalClient) batchPath {
	b := NewBatcher(c)
	return batchPath{batch: b, scripter: batchedScripter(c, b)}
}

// pathFor is where a write command on hkey goes. On a single server (or
// behind Sentinel) all share one Batcher. On Cluster each master has its
// own, so a master that stops answering holds up only the commands for
// its own slots: with one Batcher, the batch waiting on it would hold
// every caller queued behind it. Each batch still goes through the
// cluster client's pipeline, which follows a slot that moved.
func (s *Redis) pathFor(ctx context.Context, hkey string) batchPath {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return s.path
	}
	node, err := cc.MasterForKey(ctx, hkey)
	if err != nil {
		return s.path // the cluster pipeline routes it anyway, or fails it
	}
	addr := node.Options().Addr
	if p, ok := s.paths.Load(addr); ok {
		return p.(batchPath)
	}
	p, _ := s.paths.LoadOrStore(addr, newBatchPath(cc))
	return p.(batchPath)
}

// batchedScripter sends EVAL and EVALSHA through b, as commands it never
// re-sends, and waits for each no longer than its caller's context: a
// script abandoned that way may still run, its outcome unknown to the
// caller, as with any time-out.
func batchedScripter(c redis.Scripter, b *Batcher) redis.Scripter {
	return evalScripter{c: c, send: func(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
		if err := b.Do(ctx, onceCmd{cmd}); err != nil {
			// cmd still belongs to its batch: answer with another.
			abandoned := redis.NewCmd(ctx)
			abandoned.SetErr(err)
			return abandoned
		}
		return cmd
	}}
}
