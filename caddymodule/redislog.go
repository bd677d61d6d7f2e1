package caddymodule

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zapcore"
)

// go-redis logs on its own (a pool that cannot dial, a Sentinel
// failover) through the standard library's logger, as raw "redis: <date>
// pool.go:770: …" lines on stderr that break a JSON log pipeline. Its
// logger is process-wide: it is pointed at Caddy's log once, the first
// time a Redis store is opened.
var redisLogOnce sync.Once

func logRedisThroughZap() { redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) }) }

// redisLogger writes go-redis's lines to Caddy's current default logger
// (asked for at each line, so a reload's logging config applies).
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	if ce := caddy.Log().Named("idempotency.redis").Check(redisLogLevel(msg), msg); ce != nil {
		ce.Write()
	}
}

// redisLogLevel: topology news is info; everything else go-redis says
// (failed dials, bad connections discarded, recovered panics) is a
// problem an operator should see: warn.
func redisLogLevel(msg string) zapcore.Level {
	for _, p := range []string{"sentinel: new master", "sentinel: discovered new sentinel", "sentinel: selected addr"} {
		if strings.HasPrefix(msg, p) {
			return zapcore.InfoLevel
		}
	}
	return zapcore.WarnLevel
}
