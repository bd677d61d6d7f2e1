package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

// checked runs the store's check of its Redis once, as the adapter's
// background check does, and keeps the report in st.
func checked(t *testing.T, st *store.Redis, rs *redistest.Server) *store.RedisReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := store.CheckRedis(ctx, rs.Client(), store.RedisCheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.SetChecked(rep)
	return LastCheck(st)
}

// logged counts the entries at level whose message holds all of words.
func logged(logs *observer.ObservedLogs, level zapcore.Level, words ...string) int {
	n := 0
	for _, e := range logs.All() {
		if e.Level != level {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(e.Message, w)
		}
		if all {
			n++
		}
	}
	return n
}

// TestDurabilityAOF: on a real Redis, a route starts on appendonly yes;
// with appendonly no it refuses to start, naming the server and both ways
// out, unless it is volatile, which starts with a warning. A later check
// finding AOF off refuses the acks, logged at error once; on again, they
// resume with one warning.
func TestDurabilityAOF(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	st := store.NewRedis(rs.Client(), store.RedisOptions{})
	core, logs := observer.New(zap.DebugLevel)
	d := &Durability{Scope: "demo", Logger: zap.New(core)}
	if err := d.Check(nil); err != nil {
		t.Fatalf("start with nothing known yet: %v, want nil (the background check decides)", err)
	}
	if err := d.Check(checked(t, st, rs)); err != nil {
		t.Fatalf("start on appendonly yes: %v", err)
	}
	if err := d.Ackable(st); err != nil {
		t.Fatalf("acks on appendonly yes: %v", err)
	}
	ctx := context.Background()
	if err := rs.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	rep := checked(t, st, rs)
	err := d.Check(rep)
	if err == nil || !strings.Contains(err.Error(), rs.Addr()) || !strings.Contains(err.Error(), "appendonly yes") ||
		!strings.Contains(err.Error(), "durability volatile") {
		t.Fatalf("start on appendonly no: %v, want a refusal naming %s, appendonly yes and durability volatile", err, rs.Addr())
	}
	vol := &Durability{Volatile: true, Scope: "demo", Logger: zap.New(core)}
	if err := vol.Check(rep); err != nil {
		t.Fatalf("volatile start on appendonly no: %v, want a warning only", err)
	}
	if n := logged(logs, zapcore.WarnLevel, "durability volatile", "appendonly no"); n != 1 {
		t.Errorf("volatile start on appendonly no warned %d times, want 1", n)
	}
	if err := vol.Ackable(st); err != nil {
		t.Errorf("volatile acks on appendonly no: %v, want them", err)
	}
	for i := range 2 {
		if err := d.Ackable(st); err == nil {
			t.Fatalf("ack %d on appendonly no: accepted, want refused", i)
		}
	}
	if n := logged(logs, zapcore.ErrorLevel, "acks refused"); n != 1 {
		t.Errorf("refused acks logged %d times at error, want once at the turn", n)
	}
	if err := rs.Client().ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	checked(t, st, rs)
	for range 2 {
		if err := d.Ackable(st); err != nil {
			t.Fatalf("acks on appendonly yes again: %v", err)
		}
	}
	if n := logged(logs, zapcore.WarnLevel, "acks resume"); n != 1 {
		t.Errorf("resumed acks logged %d times, want once at the turn", n)
	}
	if err := d.Ackable(store.NewMemory()); err != nil || LastCheck(store.NewMemory()) != nil {
		t.Errorf("a store with no Redis: %v, want acks", err)
	}
}

// TestDurabilityFsync: an AOF that reaches the disk every second, or when
// the system flushes, starts with a warning saying what a host crash
// loses; appendfsync always starts quietly.
func TestDurabilityFsync(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	st := store.NewRedis(rs.Client(), store.RedisOptions{})
	for _, f := range []string{"always", "everysec", "no"} {
		if err := rs.Client().ConfigSet(context.Background(), "appendfsync", f).Err(); err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zap.DebugLevel)
		d := &Durability{Scope: "demo", Logger: zap.New(core)}
		if err := d.Check(checked(t, st, rs)); err != nil {
			t.Fatalf("appendfsync %s: %v", f, err)
		}
		want := 1
		if f == "always" {
			want = 0
		}
		if n := logged(logs, zapcore.WarnLevel, "appendfsync "+f, "crash of the host"); n != want {
			t.Errorf("appendfsync %s: warned %d times, want %d", f, n, want)
		}
	}
}

func TestAckContentType(t *testing.T) {
	for body, want := range map[string]string{
		"<xml><return_code>SUCCESS</return_code></xml>": "application/xml",
		` {"code":"SUCCESS"}`:                           "application/json",
		`[]`:                                            "application/json",
		"success":                                       "text/plain; charset=utf-8",
	} {
		if got := AckContentType(body); got != want {
			t.Errorf("AckContentType(%q) = %q, want %q", body, got, want)
		}
	}
}
