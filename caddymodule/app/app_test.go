package app

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/store"
)

// provisioned returns an app as Caddy makes one for a config.
func provisioned(t *testing.T) *App {
	t.Helper()
	a := new(App)
	if err := a.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	return a
}

// fakeEngine is an Engine of one scope.
type fakeEngine struct{ scope string }

func (e *fakeEngine) Scope() string                       { return e.scope }
func (e *fakeEngine) Platform() string                    { return "generic" }
func (e *fakeEngine) Target() string                      { return "http://127.0.0.1:1" }
func (e *fakeEngine) Queue() store.Queue                  { return nil }
func (e *fakeEngine) Poke()                               {}
func (e *fakeEngine) KeyState(string) (KeyDelivery, bool) { return KeyDelivery{}, false }

// TestAppsDoNotMix: two configs' apps (the old and the new one of a
// reload) keep their own routes, engines, stores and clocks.
func TestAppsDoNotMix(t *testing.T) {
	old, cur := provisioned(t), provisioned(t)
	t.Cleanup(func() { _ = old.Cleanup(); _ = cur.Cleanup() })

	rOld, rCur := &Route{Scope: "shop", Name: "shop#1", TTL: time.Hour}, &Route{Scope: "shop", Name: "shop#1", TTL: 2 * time.Hour}
	old.AddRoute(rOld)
	cur.AddRoute(rCur)
	if rt, _ := cur.RouteOfKey("shop:k"); rt != rCur {
		t.Errorf("the new config's app answers with %+v", rt)
	}
	if cur.TTLOf("shop:k") != 2*time.Hour || old.TTLOf("shop:k") != time.Hour {
		t.Errorf("ttl: new %v, old %v", cur.TTLOf("shop:k"), old.TTLOf("shop:k"))
	}
	old.RemoveRoute(rOld)
	if _, ok := cur.RouteOf("shop"); !ok {
		t.Error("removing the old config's route removed the new one's")
	}
	if n := old.ScopeNames(); len(n) != 0 {
		t.Errorf("the old config's app keeps scopes %v", n)
	}

	eOld, eCur := &fakeEngine{"async"}, &fakeEngine{"async"}
	old.AddEngine(eOld)
	cur.AddEngine(eCur)
	if others := old.RemoveEngine(eOld); others {
		t.Error("the old config's app reports another engine of its own")
	}
	if e, ok := cur.EngineOf("async"); !ok || e != eCur {
		t.Errorf("the new config's engine: %v %v", e, ok)
	}
	// Two engines of one scope in one config: the later one runs it, and
	// the earlier one's removal leaves it.
	eTwin := &fakeEngine{"async"}
	cur.AddEngine(eTwin)
	if others := cur.RemoveEngine(eCur); !others {
		t.Error("removing the replaced engine reports none left")
	}
	if es := cur.Engines(); len(es) != 1 || es[0] != eTwin {
		t.Errorf("engines: %v", es)
	}

	ref, err := LoadStore(t.Name(), func() (*Store, error) {
		m := store.NewMemory()
		return &Store{ID: "memory", Store: m, Settler: store.NewSettler(m, store.SettlerOptions{})}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = UnloadStore(t.Name()) })
	cur.UseStore(ref)
	if ids := cur.StoreIDs(); len(ids) != 0 {
		t.Errorf("a store never opened is listed: %v", ids)
	}
	if _, err := ref.Open(); err != nil {
		t.Fatal(err)
	}
	if ps, ids := cur.FindStore(""); ps == nil || len(ids) != 1 {
		t.Errorf("the new config's store: %v %v", ps, ids)
	}
	if ps, ids := old.FindStore(""); ps != nil || len(ids) != 0 {
		t.Errorf("the old config's app finds %v %v, a store it never used", ps, ids)
	}
	cur.DropStore(ref)
	if ids := cur.StoreIDs(); len(ids) != 0 {
		t.Errorf("a dropped store is listed: %v", ids)
	}

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	restore := old.SetClock(func() time.Time { return at })
	if !old.Now().Equal(at) || cur.Now().Equal(at) {
		t.Errorf("clocks: old %v, new %v", old.Now(), cur.Now())
	}
	restore()
	if old.Now().Equal(at) {
		t.Error("restore left the test clock")
	}
}

// TestCountsAcrossReload: the console's counts carry from a config's app
// to the app that replaces it (taken before the old one is cleaned up),
// and start again only once no app holds them.
func TestCountsAcrossReload(t *testing.T) {
	old := provisioned(t)
	old.Counts().Add(Forwarded)
	cur := provisioned(t)
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	cur.Counts().Add(Forwarded)
	rows := cur.Counts().Last()
	if n := rows[len(rows)-1].Counts[Forwarded.Index()]; n != 2 {
		t.Errorf("forwarded this minute after the reload: %d, want 2", n)
	}
	if err := cur.Cleanup(); err != nil {
		t.Fatal(err)
	}
	next := provisioned(t)
	defer next.Cleanup()
	rows = next.Counts().Last()
	if n := rows[len(rows)-1].Counts[Forwarded.Index()]; n != 0 {
		t.Errorf("a process whose every app was cleaned up kept %d counts", n)
	}
	if New().Counts() == next.Counts() {
		t.Error("an app of no config shares the configs' counts")
	}
}
