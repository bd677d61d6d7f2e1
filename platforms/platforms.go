// Package platforms is the one list of the platforms idemgate knows. Each
// platform is a Caddy guest module (package guest) in the namespace
// http.handlers.idempotency.platforms, described by a keying.Preset and,
// where it has them, its powers (a bill's bill.Traits, a test signer);
// everything else asks this list for the preset a route names (or the
// bill a reconciliation names, the signer the CLI's send names) and reads
// it. The seven platforms of this repository are listed
// below in their order; a platform module built in from outside (xcaddy
// --with) joins the list after them, with nothing here naming it.
package platforms

import (
	"slices"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/keying/bill"
	"github.com/idemgate/idemgate/platforms/alipay"
	"github.com/idemgate/idemgate/platforms/generic"
	"github.com/idemgate/idemgate/platforms/guest"
	"github.com/idemgate/idemgate/platforms/paypal"
	"github.com/idemgate/idemgate/platforms/standardwebhooks"
	"github.com/idemgate/idemgate/platforms/stripe"
	"github.com/idemgate/idemgate/platforms/wechatpay"
	"github.com/idemgate/idemgate/platforms/wechatpayv2"
)

// Default is the platform of a route that names none.
const Default = generic.Name

// entry is one platform: its preset and, when it has them, its bill's
// traits (when reconciliation reads its bill) and its test signer (nil
// otherwise), as its module says.
type entry struct {
	preset *keying.Preset
	bill   *bill.Traits
	sender *keying.Sender
	// catchUp: a route's catch_up can ask its read API for missing
	// payments; byOrder: by order (it has no resend).
	catchUp, byOrder bool
}

// registry is the platforms' modules, one line each.
var registry = []guest.Module{
	new(alipay.Module),
	new(wechatpay.Module),
	new(wechatpayv2.Module),
	new(stripe.Module),
	new(paypal.Module),
	new(standardwebhooks.Module),
	new(generic.Module),
}

// entryOf is what m says of its platform.
func entryOf(m guest.Module) entry {
	e := entry{preset: m.Preset()}
	if b, ok := m.(guest.Biller); ok {
		e.bill = b.Bill()
	}
	if s, ok := m.(guest.Signer); ok {
		e.sender = s.Sender()
	}
	r, reads := m.(guest.Reader)
	if c, ok := m.(guest.CatchUpper); ok && reads && r.ReadAPI() != nil {
		e.catchUp, e.byOrder = true, !c.Resends()
	}
	return e
}

// loaded is the registry and then the platform modules registered with
// Caddy that it does not list (built in from outside), by module ID;
// taken at first use, once every package's init has registered its
// modules.
var loaded = sync.OnceValues(func() ([]entry, map[string]entry) {
	var all []entry
	for _, m := range registry {
		all = append(all, entryOf(m))
	}
	for _, info := range caddy.GetModules(guest.Namespace) {
		if slices.ContainsFunc(registry, func(m guest.Module) bool { return m.Preset().Name == info.ID.Name() }) {
			continue
		}
		m, ok := info.New().(guest.Module)
		if !ok || m.Preset() == nil || m.Preset().Name != info.ID.Name() {
			continue
		}
		all = append(all, entryOf(m))
	}
	byName := make(map[string]entry, len(all))
	for _, e := range all {
		if _, dup := byName[e.preset.Name]; dup {
			panic("platforms: preset listed twice: " + e.preset.Name)
		}
		byName[e.preset.Name] = e
	}
	return all, byName
})

// Lookup is the preset named name, nil when there is none.
func Lookup(name string) *keying.Preset {
	_, byName := loaded()
	return byName[name].preset
}

// BillOf is what reconciliation with the named platform's bill allows
// for, nil when there is no such platform or reconciliation reads no bill
// of it.
func BillOf(name string) *bill.Traits {
	_, byName := loaded()
	if b := byName[name].bill; b != nil && b.Format != nil {
		return b
	}
	return nil
}

// SenderOf signs the named platform's test notifications (the CLI's send
// and keygen), nil when there is no such platform or it has no signer.
func SenderOf(name string) *keying.Sender {
	_, byName := loaded()
	return byName[name].sender
}

// CatchUp lists the names of the platforms a route's catch_up can ask for
// missing payments (a read API), in the registry's order.
func CatchUp() []string {
	all, _ := loaded()
	var names []string
	for _, e := range all {
		if e.catchUp {
			names = append(names, e.preset.Name)
		}
	}
	return names
}

// ByOrder lists the names of the platforms that catch_up asks by order
// (they have no resend: `recover query_route`, the admin API's query), in
// the registry's order.
func ByOrder() []string {
	all, _ := loaded()
	var names []string
	for _, e := range all {
		if e.byOrder {
			names = append(names, e.preset.Name)
		}
	}
	return names
}

// Module is a new, unconfigured module of the named platform, nil when
// there is none.
func Module(name string) guest.Module {
	info, err := caddy.GetModule(string(guest.ID(name)))
	if err != nil {
		return nil
	}
	m, _ := info.New().(guest.Module)
	return m
}

// All lists the presets in the registry's order.
func All() []*keying.Preset {
	all, _ := loaded()
	ps := make([]*keying.Preset, len(all))
	for i, e := range all {
		ps[i] = e.preset
	}
	return ps
}

// Billed lists the names of the presets whose bill reconciliation reads,
// sorted.
func Billed() []string {
	all, _ := loaded()
	var names []string
	for _, e := range all {
		if BillOf(e.preset.Name) != nil {
			names = append(names, e.preset.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Names lists the presets' names, sorted.
func Names() []string {
	presets := All()
	names := make([]string, 0, len(presets))
	for _, p := range presets {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}
