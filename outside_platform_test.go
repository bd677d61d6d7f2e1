package idemgate

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// acmePay is a platform written outside this repository, as its own Go
// module: a Caddy guest module in the handler's platforms namespace that
// owns its setting (`secret`, parsed from the route's flat block) and
// checks an HMAC-SHA256 of the body in the Acme-Signature header; the key
// is the body's "id".
const acmePay = `package acmepay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/guest"
)

func init() { caddy.RegisterModule(Module{}) }

type Module struct {
	Secret string ` + "`json:\"secret,omitempty\"`" + `
}

func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: guest.ID("acmepay"), New: func() caddy.Module { return new(Module) }}
}

var preset = &keying.Preset{Name: "acmepay", Title: "AcmePay", Ack: keying.Ack{Status: 200, Body: "ok"}}

func (*Module) Preset() *keying.Preset { return preset }

func (m *Module) UnmarshalSubdirective(d *caddyfile.Dispenser, name string) (bool, error) {
	if name != "secret" {
		return false, nil
	}
	if !d.NextArg() {
		return true, d.ArgErr()
	}
	m.Secret = d.Val()
	if d.NextArg() {
		return true, d.ArgErr()
	}
	return true, nil
}

func (m *Module) Build(r guest.Route) (keying.Platform, error) {
	secret, err := r.Secret("secret", m.Secret)
	if err != nil {
		return nil, err
	}
	if secret == "" && !r.NoVerify {
		return nil, fmt.Errorf("acmepay: %w", keying.ErrNeedsSecret)
	}
	return &platform{secret: []byte(secret), noVerify: r.NoVerify}, nil
}

type platform struct {
	secret   []byte
	noVerify bool
}

func (*platform) Name() string { return "acmepay" }

func (p *platform) Verify(r *keying.Request) (*keying.Notification, error) {
	if !p.noVerify {
		mac := hmac.New(sha256.New, p.secret)
		mac.Write(r.Body)
		if !hmac.Equal([]byte(hex.EncodeToString(mac.Sum(nil))), []byte(r.Header.Get("Acme-Signature"))) {
			return nil, keying.ErrSignature
		}
	}
	f := keying.NewFields(r)
	id, _, err := f.JSON("id")
	if err != nil || id == "" {
		return nil, fmt.Errorf("%w: no id", keying.ErrMalformed)
	}
	return &keying.Notification{Fields: f, Key: id, Fingerprint: keying.Digest(r.Body)}, nil
}

func (*platform) Success(status int, _ http.Header, _ []byte) bool { return keying.Is2xx(status) }

func (*platform) RetryWindow() time.Duration { return 24 * time.Hour }

var _ guest.Module = (*Module)(nil)
var _ guest.Subdirectives = (*Module)(nil)
`

// TestOutsidePlatform: a platform written outside this repository builds
// in as `xcaddy build --with github.com/idemgate/idemgate=<checkout>
// --with example.com/acmepay=<dir>` does it (a main importing Caddy's command, this root package and the platform
// module, with replaces to both), and works with nothing here naming it:
// list-modules shows it, and a route of `platform acmepay` with its own
// `secret` forwards a signed notification once, replays a duplicate and
// refuses a bad signature with 401. xcaddy itself is not run: it fetches
// its own module and Caddy's through the network; the main it writes is
// the one below, and it builds with `go build` the same way.
func TestOutsidePlatform(t *testing.T) {
	testenv.Slow(t, "builds a Caddy binary with an outside platform (a minute or two)")
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plat := filepath.Join(dir, "acmepay")
	build := filepath.Join(dir, "build")
	for _, d := range []string{plat, build} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	caddyVersion := depVersion(t, "github.com/caddyserver/caddy/v2")
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(plat, "acmepay.go"): acmePay,
		filepath.Join(plat, "go.mod"): `module example.com/acmepay

go 1.26

require (
	github.com/caddyserver/caddy/v2 ` + caddyVersion + `
	github.com/idemgate/idemgate v0.0.0
)

replace github.com/idemgate/idemgate => ` + repo + `
`,
		filepath.Join(plat, "go.sum"): string(sum),
		filepath.Join(build, "main.go"): `package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "example.com/acmepay"
	_ "github.com/idemgate/idemgate"
)

func main() { caddycmd.Main() }
`,
		filepath.Join(build, "go.mod"): `module example.com/caddybuild

go 1.26

require (
	example.com/acmepay v0.0.0
	github.com/caddyserver/caddy/v2 ` + caddyVersion + `
	github.com/idemgate/idemgate v0.0.0
)

replace github.com/idemgate/idemgate => ` + repo + `

replace example.com/acmepay => ` + plat + `
`,
		filepath.Join(build, "go.sum"): string(sum),
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(build, "caddy")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = build
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of a Caddy main with an outside platform: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("list-modules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "http.handlers.idempotency.platforms.acmepay") {
		t.Fatalf("list-modules does not show the outside platform:\n%s", out)
	}

	// The legacy backend counts business runs.
	var runs atomic.Int64
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		io.WriteString(w, "handled")
	})}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bl)
	t.Cleanup(func() { backend.Close() })

	port := freeLoopbackPort(t)
	const secret = "acme-test-secret"
	caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
}
http://127.0.0.1:%d {
	idempotency {
		platform acmepay
		secret %s
		store memory
	}
	reverse_proxy %s
}
`, filepath.Join(dir, "data"), port, secret, bl.Addr())
	cf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cf, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(bin, "run", "--config", cf, "--adapter", "caddyfile")
	run.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "HOME="+dir)
	var logs bytes.Buffer
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		run.Process.Kill()
		run.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/notify", port)
	body := []byte(`{"id":"evt_1","amount":"9.99"}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	sig := hex.EncodeToString(mac.Sum(nil))
	post := func(sig string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Acme-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, _ := post("bad")
		if status != 0 {
			if status != http.StatusUnauthorized {
				t.Fatalf("a bad signature got %d, want 401", status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, text := post(sig); status != http.StatusOK || text != "handled" {
		t.Fatalf("the first signed copy got %d %q, want the backend's 200 handled", status, text)
	}
	if status, text := post(sig); status != http.StatusOK || text != "handled" {
		t.Fatalf("the duplicate got %d %q, want the replayed 200 handled", status, text)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the backend ran %d times, want 1", n)
	}
}

// freeLoopbackPort is a loopback port nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
