package platforms

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/guest"
)

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// wxAPIv3Key is a 32-byte APIv3 key: WeChat Pay's constructor wants one
// even without verification, to decrypt.
const wxAPIv3Key = "a7cde1f2b3c4d5e6f7a8b9c0d1e2f3a4"

// build is the named platform's module with settings (its JSON) built for
// a route that verifies or not (noVerify); secrets and files are the
// settings' values as written.
func build(name, settings string, noVerify bool) (keying.Platform, error) {
	m := Module(name)
	if m == nil {
		return nil, fmt.Errorf("unknown platform %q", name)
	}
	if settings != "" {
		if err := json.Unmarshal([]byte(settings), m); err != nil {
			return nil, err
		}
	}
	return m.Build(guest.Route{
		NoVerify: noVerify,
		Secret:   func(_, v string) (string, error) { return v, nil },
		Resolve:  func(v string) string { return v },
		PEM:      func(_, v string) ([]byte, error) { return []byte(v), nil },
	})
}

func mustBuild(t testing.TB, name, settings string, noVerify bool) keying.Platform {
	t.Helper()
	p, err := build(name, settings, noVerify)
	if err != nil {
		t.Fatalf("build(%q): %v", name, err)
	}
	return p
}

// TestNamesHasEveryPreset: every platform folder is in the registry and
// the registry names nothing else, so a new platform's folder and its
// registry line are all it takes (no list here to keep in step).
func TestNamesHasEveryPreset(t *testing.T) {
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "testdata" && d.Name() != "guest" { // guest: what a platform module is
			folders = append(folders, d.Name())
		}
	}
	var names []string
	for _, name := range Names() {
		names = append(names, strings.ReplaceAll(name, "_", "")) // wechatpay_v2 lives in wechatpayv2/
	}
	slices.Sort(names)
	if !slices.Equal(folders, names) {
		t.Fatalf("platform folders %v, registered presets %v (as folder names): each folder needs its registry line", folders, names)
	}
	for _, want := range []string{"alipay", "generic", "paypal", "standard_webhooks", "stripe", "wechatpay", "wechatpay_v2"} {
		if !slices.Contains(Names(), want) {
			t.Errorf("Names() = %v lost %s", Names(), want)
		}
	}
	for _, name := range Names() {
		if p := Lookup(name); p == nil || p.Name != name || p.Title == "" || Module(name) == nil {
			t.Errorf("Lookup(%q) = %+v", name, p)
		}
	}
	if Lookup(Default) == nil || Lookup("nope") != nil || Module("nope") != nil {
		t.Fatal("Lookup of the default or an unknown name")
	}
}

func TestPresetsNeedTheirSecret(t *testing.T) {
	for _, name := range Names() {
		if name == Default {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := build(name, "", false)
			if !errors.Is(err, keying.ErrNeedsSecret) {
				t.Fatalf("build(%q, {}) = %v, want ErrNeedsSecret", name, err)
			}
			p, err := build(name, "", true)
			if err != nil {
				t.Fatalf("build(%q, NoVerify) = %v", name, err)
			}
			if p.Name() != name {
				t.Fatalf("Name() = %q", p.Name())
			}
			if p.RetryWindow() < 24*time.Hour {
				t.Fatalf("RetryWindow() = %s, want ≥ 24h", p.RetryWindow())
			}
		})
	}
}

// takes tells whether the named platform's module takes the Caddyfile
// subdirective line (its settings are its own: a route of another
// platform is refused it by the handler).
func takes(t *testing.T, name, line string) bool {
	t.Helper()
	m, ok := Module(name).(guest.Subdirectives)
	if !ok {
		return false
	}
	d := caddyfile.NewTestDispenser(line)
	d.Next()
	handled, err := m.UnmarshalSubdirective(d, d.Val())
	if err != nil {
		t.Fatalf("%s: %s: %v", name, line, err)
	}
	return handled
}

// TestPins: app_id is Alipay's option, mchid WeChat Pay's; a module that
// takes one pins merchants (guest.Pinner).
func TestPins(t *testing.T) {
	pins := map[string]string{"alipay": "app_id", "wechatpay": "mchid", "wechatpay_v2": "mchid"}
	for _, name := range Names() {
		for _, option := range []string{"app_id", "mchid"} {
			if got, want := takes(t, name, option+" 1"), pins[name] == option; got != want {
				t.Errorf("%s takes %s: %v, want %v", name, option, got, want)
			}
		}
		if _, ok := Module(name).(guest.Pinner); ok != (pins[name] != "") {
			t.Errorf("%s: Pinner %v, pins %q", name, ok, pins[name])
		}
	}
}

func TestSecretsStayOutOfErrors(t *testing.T) {
	const secret = "whsec_c2VjcmV0LXNob3VsZC1uZXZlci1sZWFr" // base64 of a marker
	const v3key = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name, settings, secret string
		req                    *keying.Request
	}{
		{"stripe", `{"secret":"` + secret + `"}`, secret, &keying.Request{Method: "POST", Header: http.Header{"Stripe-Signature": {"t=1,v1=00"}}, Body: []byte(`{"id":"evt_1"}`), Now: testNow}},
		{"standard_webhooks", `{"secret":"` + secret + `"}`, secret, &keying.Request{Method: "POST", Header: http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {"1"}, "Webhook-Signature": {"v1,AAAA"}}, Body: []byte(`{}`), Now: testNow}},
		{"wechatpay_v2", `{"secret":"` + v3key + `","mchid":["1"]}`, v3key, &keying.Request{Method: "POST", Body: []byte(`<xml><sign>00000000000000000000000000000000</sign><transaction_id>1</transaction_id></xml>`), Now: testNow}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustBuild(t, c.name, c.settings, false).Verify(c.req)
			if err == nil {
				t.Fatal("forged request verified")
			}
			if strings.Contains(err.Error(), c.secret) || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}

// TestErrorShape: every preset's errors read "<preset>: <what>", once.
func TestErrorShape(t *testing.T) {
	for _, name := range Names() {
		if name == Default {
			continue
		}
		t.Run(name, func(t *testing.T) {
			_, err := build(name, "", false)
			msg := err.Error()
			if !strings.HasPrefix(msg, name+": ") || strings.Count(msg, name) != 1 || strings.Contains(msg, "platform "+name) {
				t.Fatalf("New error %q is not %q once", msg, name+": …")
			}
			p := mustBuild(t, name, `{"secret":"`+wxAPIv3Key+`"}`, true)
			_, err = p.Verify(&keying.Request{Method: http.MethodPost, Header: http.Header{}, Body: []byte("\x00"), Now: testNow})
			if err == nil || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("Verify error %q does not start with %q", err, name+": ")
			}
		})
	}
}

func TestRetrySchedules(t *testing.T) {
	cases := []struct {
		platform string
		n        int
		min, max time.Duration
	}{
		{"alipay", 7, 24 * time.Hour, 25 * time.Hour},
		{"wechatpay", 15, 24 * time.Hour, 24*time.Hour + 5*time.Minute},
		{"wechatpay_v2", 15, 24 * time.Hour, 24*time.Hour + 5*time.Minute},
		{"stripe", 0, 71 * time.Hour, 72 * time.Hour},
		{"paypal", 25, 66 * time.Hour, 78 * time.Hour},
		{"standard_webhooks", 7, 27 * time.Hour, 28 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.platform, func(t *testing.T) {
			s := Lookup(c.platform).Schedule
			if c.n > 0 && len(s) != c.n {
				t.Fatalf("%d retries, want %d", len(s), c.n)
			}
			if tot := s.Total(); tot < c.min || tot > c.max {
				t.Fatalf("schedule spans %s, want %s..%s", tot, c.min, c.max)
			}
		})
	}
	if Lookup(Default).Schedule != nil {
		t.Fatal("generic has a schedule")
	}
}

func TestBilled(t *testing.T) {
	got := Billed()
	for _, want := range []string{"alipay", "paypal", "stripe", "wechatpay", "wechatpay_v2"} {
		if !slices.Contains(got, want) {
			t.Errorf("Billed() = %v lost %s", got, want)
		}
	}
	for _, name := range Names() {
		if has := BillOf(name) != nil && BillOf(name).Format != nil; has != slices.Contains(got, name) {
			t.Errorf("%s: has a bill format %v, listed by Billed() %v", name, has, !has)
		}
	}
	if BillOf("nope") != nil {
		t.Error("BillOf an unknown platform")
	}
}

// TestReturnIsAlipays: `return` says what Alipay's browser return is; only
// a preset with a browser return takes it.
func TestReturnIsAlipays(t *testing.T) {
	for _, name := range Names() {
		if got, want := takes(t, name, "return display"), name == "alipay"; got != want {
			t.Errorf("%s takes return: %v, want %v", name, got, want)
		}
	}
	if _, err := build("alipay", `{"return":"display"}`, true); err != nil {
		t.Fatal(err)
	}
}

// TestCatchUpLists: the platforms with a read API for catch_up, and those
// of them asked by order, are told by their modules, not by a list.
func TestCatchUpLists(t *testing.T) {
	if got, want := CatchUp(), []string{"alipay", "wechatpay", "stripe", "paypal"}; !slices.Equal(got, want) {
		t.Errorf("CatchUp() = %v, want %v", got, want)
	}
	if got, want := ByOrder(), []string{"alipay", "wechatpay"}; !slices.Equal(got, want) {
		t.Errorf("ByOrder() = %v, want %v", got, want)
	}
}
