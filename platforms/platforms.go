// Package platforms is the one list of the platforms idemgate knows. Each
// platform is a keying.Preset; everything else asks this list for the
// preset a route names and reads it, so adding a platform is its folder
// and one line below.
package platforms

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/alipay"
	"github.com/idemgate/idemgate/platforms/generic"
	"github.com/idemgate/idemgate/platforms/paypal"
	"github.com/idemgate/idemgate/platforms/standardwebhooks"
	"github.com/idemgate/idemgate/platforms/stripe"
	"github.com/idemgate/idemgate/platforms/wechatpay"
	"github.com/idemgate/idemgate/platforms/wechatpayv2"
)

// Default is the platform of a route that names none.
const Default = generic.Name

// presets are the platforms, one line each.
var presets = []*keying.Preset{
	alipay.Preset,
	wechatpay.Preset,
	wechatpayv2.Preset,
	stripe.Preset,
	paypal.Preset,
	standardwebhooks.Preset,
	generic.Preset,
}

// byName indexes presets by name.
var byName = func() map[string]*keying.Preset {
	m := make(map[string]*keying.Preset, len(presets))
	for _, p := range presets {
		if _, dup := m[p.Name]; dup {
			panic("platforms: preset listed twice: " + p.Name)
		}
		m[p.Name] = p
	}
	return m
}()

// Lookup is the preset named name, nil when there is none.
func Lookup(name string) *keying.Preset { return byName[name] }

// All lists the presets in the registry's order.
func All() []*keying.Preset { return slices.Clone(presets) }

// Billed lists the names of the presets whose bill reconciliation reads,
// sorted.
func Billed() []string {
	var names []string
	for _, p := range presets {
		if p.Bill.Format != nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Names lists the presets' names, sorted.
func Names() []string {
	names := make([]string, 0, len(presets))
	for _, p := range presets {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// New returns the named platform configured with cfg, refusing a pinning
// option the platform has no use for.
func New(name string, cfg keying.Config) (keying.Platform, error) {
	p := Lookup(name)
	if p == nil {
		return nil, fmt.Errorf("unknown platform %q (have %s)", name, strings.Join(Names(), ", "))
	}
	for _, pin := range []struct {
		option string
		set    bool
	}{{"app_id", len(cfg.AppIDs) > 0}, {"mchid", len(cfg.MchIDs) > 0}} {
		if pin.set && p.Pins != pin.option {
			return nil, fmt.Errorf("%s: %s is for %s only", name, pin.option, strings.Join(pinnedBy(pin.option), " and "))
		}
	}
	return p.New(cfg)
}

// pinnedBy names the presets that take option.
func pinnedBy(option string) []string {
	var names []string
	for _, p := range presets {
		if p.Pins == option {
			names = append(names, p.Name)
		}
	}
	return names
}
