package cache

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// onceScripter sends EVAL and EVALSHA as commands go-redis never re-sends
// (see run); SCRIPT EXISTS and LOAD go through unchanged.
type onceScripter struct {
	c interface {
		redis.Scripter
		Process(ctx context.Context, cmd redis.Cmder) error
	}
}

type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func (o onceScripter) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	cmd.SetFirstKeyPos(3)
	_ = o.c.Process(ctx, onceCmd{cmd})
	return cmd
}

func (o onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval", script, keys, args)
}

func (o onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha", sha1, keys, args)
}

func (o onceScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval_ro", script, keys, args)
}

func (o onceScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha_ro", sha1, keys, args)
}

func (o onceScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return o.c.ScriptExists(ctx, hashes...)
}

func (o onceScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return o.c.ScriptLoad(ctx, script)
}

// ErrNotReplicated: a write was not acknowledged by RedisOptions.WaitReplicas
// replicas in time. It may or may not have been applied, and may be lost in
// a failover: callers treat it like any other store error.
var ErrNotReplicated = errors.New("cache: redis write not acknowledged by enough replicas")
