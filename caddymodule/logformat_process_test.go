package caddymodule

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestLogIsJSONWithRedisDown: a gateway started with its Redis down, and
// refusing notifications for it, writes only JSON lines — go-redis's own
// complaints included, at warn, through Caddy's log.
func TestLogIsJSONWithRedisDown(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	be := newBackend(t)
	site := fmt.Sprintf(`
	idempotency {
		key k:{idempotency.form.out_trade_no}
		store redis %s
		store_timeout 500ms
	}
	reverse_proxy %s`, reservePort(t), be.addr())
	p := startProcWith(t, t.TempDir(), "\tlog {\n\t\tformat json\n\t}", site)
	for i := range 3 {
		if r := notify(t, p.base, fmt.Sprintf("down-%d", i)); r.status != 503 {
			t.Fatalf("notification with Redis down: %d %q, want 503", r.status, r.body)
		}
	}
	eventually(t, 10*time.Second, "go-redis's dial failures in the log", func() bool {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), `"logger":"idempotency.redis"`) && strings.Contains(string(b), "failed to dial")
	})
	p.stop()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var lines, redisLines int
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lines++
		var entry map[string]any
		if err := json.Unmarshal([]byte(l), &entry); err != nil {
			t.Errorf("not a JSON line: %q", l)
			continue
		}
		if entry["logger"] == "idempotency.redis" {
			redisLines++
			if entry["level"] != "warn" {
				t.Errorf("go-redis's line at %v, want warn: %q", entry["level"], l)
			}
		}
	}
	if n := be.totalHits(); n != 0 {
		t.Errorf("backend ran %d times with the store down, want 0", n)
	}
	if lines < 5 || redisLines == 0 {
		t.Errorf("%d lines, %d of go-redis: the test saw too little", lines, redisLines)
	}
}
