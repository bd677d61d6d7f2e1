package caddymodule

import (
	"net/http"
	"testing"
	"time"

	async "github.com/idemgate/idemgate/delivery"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store"
)

// The deliver async suite: the real module (in this process, or the built
// binary as separate processes), a real backend and real stores. Every
// case asserts how many times the backend ran per key. The tests in this
// process live with the engine (delivery/gateway_test.go); here are the
// backend's helpers this package's process and durability tests share.

// asyncBackend is the backend behind `deliver async`
// (gatewaytest.AsyncBackend): it counts runs per key (the form's
// out_trade_no), deliveries in flight at once, and when each started.
type asyncBackend struct{ *gatewaytest.AsyncBackend }

// newAsyncBackend listens on addr ("127.0.0.1:0" for any port).
func newAsyncBackend(t testing.TB, addr string) *asyncBackend {
	return &asyncBackend{gatewaytest.NewAsyncBackend(t, addr)}
}

func (b *asyncBackend) addr() string             { return b.Addr() }
func (b *asyncBackend) count(key string) int     { return b.Count(key) }
func (b *asyncBackend) total() int               { return b.Total() }
func (b *asyncBackend) setDelay(d time.Duration) { b.SetDelay(d) }

const asyncRoute = gatewaytest.AsyncRoute

// record looks a key up in the only store loaded in this process.
func record(t testing.TB, key string) *store.Record { t.Helper(); return gatewaytest.Record(t, key) }

// waitAnswered waits until key is answered in the store.
func waitAnswered(t testing.TB, within time.Duration, key string) *store.Record {
	t.Helper()
	return gatewaytest.WaitAnswered(t, within, key)
}

// percentiles returns the median and the maximum.
func percentiles(ds []time.Duration) (p50, top time.Duration) { return gatewaytest.Percentiles(ds) }

// TestAsyncDurabilityReplicas: with `durability replicas 1` (and the
// store's wait_replicas 1), a notification is acked once a replica has it;
// with the replica gone the WAIT is not confirmed: 503, never the ack,
// and nothing is delivered.
func TestAsyncDurabilityReplicas(t *testing.T) {
	testenv.Slow(t, "fault: a replica gone")
	master := redistest.StartAOF(t)
	replica := redistest.StartWith(t, redistest.Options{ReplicaOf: master})
	be := newAsyncBackend(t, "127.0.0.1:0")
	storeID := "store redis " + master.Addr() + " {\n\t\t\t\twait_replicas 1 300ms\n\t\t\t}"
	base := startCaddy(t, asyncRoute, "{store}", storeID, "{backend}", be.addr(), "{extra}", "durability replicas 1")
	if r := notify(t, base, "dr-1"); r.status != 200 || r.body != "success" {
		t.Fatalf("with the replica up: %d %q, want the ack", r.status, r.body)
	}
	waitAnswered(t, 10*time.Second, "demo:dr-1")
	replica.Stop()
	r := notify(t, base, "dr-2")
	if r.status != http.StatusServiceUnavailable || r.body == "success" {
		t.Fatalf("with the replica gone: %d %q, want 503 and no ack", r.status, r.body)
	}
	time.Sleep(3 * async.MaxTakeWait)
	if be.count("dr-1") != 1 || be.count("dr-2") != 0 {
		t.Errorf("backend ran %d times for dr-1 (want 1) and %d for dr-2 (want 0)", be.count("dr-1"), be.count("dr-2"))
	}
}
