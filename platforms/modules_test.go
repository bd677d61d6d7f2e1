package platforms

import (
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/platforms/guest"
)

// TestEachPlatformAModule: every platform is a Caddy guest module in the
// handler's platforms namespace, its ID the name a route writes after
// `platform`, describing itself with the registry's preset; those with a
// bill, a test signer or a re-signer say so by the power's interface
// (merchant pinning: TestPins).
func TestEachPlatformAModule(t *testing.T) {
	mods := caddy.GetModules(guest.Namespace)
	if len(mods) < 7 {
		t.Fatalf("%d modules in %s, want the seven platforms: %v", len(mods), guest.Namespace, mods)
	}
	for _, name := range Names() {
		info, err := caddy.GetModule(string(guest.ID(name)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		m, ok := info.New().(guest.Module)
		if !ok {
			t.Errorf("%s: module %T is no guest.Module", name, info.New())
			continue
		}
		if m.Preset() != Lookup(name) {
			t.Errorf("%s: the module's preset is not the registry's", name)
		}
		_, billed := m.(guest.Biller)
		if want := BillOf(name) != nil; billed != want {
			t.Errorf("%s: Biller %v, the registry says bill %v", name, billed, want)
		}
		if _, ok := m.(guest.Resigner); ok != (name == "stripe" || name == "standard_webhooks") {
			t.Errorf("%s: Resigner %v: only the platforms that sign with a shared secret re-sign", name, ok)
		}
		if s, ok := m.(guest.Signer); ok != (SenderOf(name) != nil) || ok && s.Sender() != SenderOf(name) {
			t.Errorf("%s: Signer %v, the registry has a sender %v", name, ok, SenderOf(name) != nil)
		}
	}
}
