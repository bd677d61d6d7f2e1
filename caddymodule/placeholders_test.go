package caddymodule

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// adaptSite adapts a Caddyfile whose one site holds body.
func adaptSite(t *testing.T, body string) ([]byte, error) {
	t.Helper()
	cf := "http://localhost:8080 {\n" + body + "\n}\n"
	out, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
	return out, err
}

// TestAdaptRefusesUnknownPlaceholders: a typo in an {idempotency.*}
// placeholder fails `adapt` (and so `validate` and `run`), naming the
// template and the placeholders that exist; good templates adapt.
func TestAdaptRefusesUnknownPlaceholders(t *testing.T) {
	tests := []struct {
		name, block string
		want        string // "" = adapts
	}{
		{"json typo", "key o:{idempotency.jsn.id}", "key: {idempotency.jsn.id}: unknown placeholder; known: {idempotency.json.<path>}"},
		{"no field", "key o:{idempotency.form}", "key: {idempotency.form}: names no field"},
		{"empty field", "key o:{idempotency.json.}", "names no field"},
		{"other platform's fields", "platform stripe\n\tkey s:{idempotency.alipay.trade_no}", "this route's platform is stripe, not alipay"},
		{"preset without extra fields", "platform stripe\n\tkey s:{idempotency.stripe.id}", "the stripe preset offers no {idempotency.stripe.*} fields"},
		{"generic has no extra fields", "key s:{idempotency.generic.id}", "offers no {idempotency.generic.*} fields"},
		{"wechatpay fields need the APIv3 key", "platform wechatpay\n\tverify off\n\tkey w:{idempotency.wechatpay.transaction_id}", "only with `secret`"},
		{"key in the key", "key k:{idempotency.key}", "the key is not known yet"},
		{"outcome in the fingerprint", "key k:{idempotency.form.a}\n\tfingerprint {idempotency.outcome}", "fingerprint: {idempotency.outcome}: the outcome is not known yet"},
		{"typo in on_duplicate", "key k:{idempotency.form.a}\n\ton_duplicate redirect /o/{idempotency.from.a}", "on_duplicate redirect: {idempotency.from.a}"},
		{"typo in on_duplicate body", "key k:{idempotency.form.a}\n\ton_duplicate respond 200 {idempotency.xm.a}", "on_duplicate body: {idempotency.xm.a}"},

		{"json, form, xml", "key k:{idempotency.json.a.b}:{idempotency.form.c}:{idempotency.xml.d}", ""},
		{"caddy placeholders", "key k:{http.request.header.X-Id}:{http.request.uri.query.id}", ""},
		{"escaped braces", `key k:\{idempotency.jsn.id\}:{idempotency.form.a}`, ""},
		{"alipay fields", "platform alipay\n\tverify off\n\tkey a:{idempotency.alipay.out_trade_no}:{idempotency.event}", ""},
		{"wechatpay fields with the key", "platform wechatpay\n\tverify off\n\tsecret {env.X}\n\tkey w:{idempotency.wechatpay.amount.total}:{idempotency.event}", ""},
		{"wechatpay_v2 fields", "platform wechatpay_v2\n\tverify off\n\tkey w:{idempotency.wechatpay_v2.out_trade_no}:{idempotency.event}", ""},
		{"key and outcome on duplicates", "key k:{idempotency.form.a}\n\tfingerprint {idempotency.key}\n\ton_duplicate respond 200 \"{idempotency.key} {idempotency.outcome}\"", ""},
		{"fingerprint off", "key k:{idempotency.form.a}\n\tfingerprint off", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := adaptSite(t, "idempotency {\n\t"+tt.block+"\n}\nrespond ok")
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("adapt refused a good template: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("adapt accepted it; want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestAdaptRefusesUnknownPlatform: the error names the valid platforms.
func TestAdaptRefusesUnknownPlatform(t *testing.T) {
	_, err := adaptSite(t, "idempotency {\n\tplatform alipy\n}\nrespond ok")
	if err == nil {
		t.Fatal("adapt accepted platform alipy")
	}
	for _, want := range []string{`unknown platform "alipy"`, "alipay", "wechatpay_v2", "standard_webhooks", "generic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestValidateChecksPlaceholdersInJSON: a JSON config (no Caddyfile)
// gets the same check when it is provisioned.
func TestValidateChecksPlaceholdersInJSON(t *testing.T) {
	cfg := `{"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[
		{"handler":"idempotency","key":"o:{idempotency.jsn.id}","store":{"type":"memory"}},
		{"handler":"static_response","body":"ok"}]}]}}}}}`
	err := validateJSON(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "key: {idempotency.jsn.id}: unknown placeholder") {
		t.Fatalf("caddy.Validate: got %v, want the unknown placeholder named", err)
	}
}

func validateJSON(t *testing.T, cfg string) error {
	t.Helper()
	var c caddy.Config
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	return caddy.Validate(&c)
}

// TestSecretErrorsNameTheCause: a secret that renders empty names the unset
// variable or the missing file, never "open : no such file or directory".
func TestSecretErrorsNameTheCause(t *testing.T) {
	dir := t.TempDir()
	key, _ := platformtest.Keys(t)
	pemPath := filepath.Join(dir, "alipay_public_key.pem")
	if err := os.WriteFile(pemPath, platformtest.PublicKeyPEM(t, &key.PublicKey), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IDEMGATE_TEST_PEM", pemPath)
	t.Setenv("IDEMGATE_TEST_SET_EMPTY", "")
	os.Unsetenv("IDEMGATE_TEST_UNSET")
	missing := filepath.Join(dir, "no-such.pem")
	tests := []struct {
		name, block string
		want        string // "" = provisions
	}{
		{"unset env secret", "platform stripe\n\tsecret {env.IDEMGATE_TEST_UNSET}",
			"secret: {env.IDEMGATE_TEST_UNSET} is empty (IDEMGATE_TEST_UNSET is not set)"},
		{"empty env secret", "platform stripe\n\tsecret {env.IDEMGATE_TEST_SET_EMPTY}",
			"secret: {env.IDEMGATE_TEST_SET_EMPTY} is empty"},
		{"missing secret file", "platform stripe\n\tsecret {file." + missing + "}",
			"secret: {file." + missing + "}: file " + missing + " does not exist"},
		{"empty secret file", "platform standard_webhooks\n\tsecret {file." + emptyFile + "}",
			"secret: {file." + emptyFile + "}: file " + emptyFile + " is empty"},
		{"public_key path from an unset env", "platform alipay\n\tpublic_key {env.IDEMGATE_TEST_UNSET}",
			"public_key: {env.IDEMGATE_TEST_UNSET} is empty"},
		{"public_key file missing", "platform alipay\n\tpublic_key " + missing,
			"public_key: file " + missing + " does not exist"},
		{"certificate file missing", "platform paypal\n\twebhook_id WH-1\n\tcertificate " + missing,
			"certificate: file " + missing + " does not exist"},
		{"webhook_id unset", "platform paypal\n\twebhook_id {env.IDEMGATE_TEST_UNSET}",
			"webhook_id: {env.IDEMGATE_TEST_UNSET} is empty"},
		{"public_key from env", "platform alipay\n\tpublic_key {env.IDEMGATE_TEST_PEM}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := adaptSite(t, "idempotency {\n\t"+tt.block+"\n\tstore memory\n}\nrespond ok")
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			if strings.Contains(string(out), pemPath) {
				t.Fatalf("the adapted config holds the resolved path: secrets must be resolved at start only")
			}
			err = validateJSON(t, string(out))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("provisioning failed: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("provisioned; want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "open :") {
				t.Errorf("error %q is the unhelpful open error", err)
			}
		})
	}
}

// TestBinaryValidateAndAdapt: `idemgate adapt` and `idemgate validate`
// refuse a mistyped platform and a mistyped placeholder, with the reason.
func TestBinaryValidateAndAdapt(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	bin := gatewayBinary(t)
	dir := t.TempDir()
	write := func(name, site string) string {
		p := filepath.Join(dir, name)
		text := "{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:0 {\n" + site + "\n}\n"
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo := write("typo.Caddyfile", "idempotency {\n\tkey o:{idempotency.jsn.id}\n\tstore memory\n}\nrespond ok")
	platform := write("platform.Caddyfile", "idempotency {\n\tplatform strpe\n}\nrespond ok")
	good := write("good.Caddyfile", "idempotency {\n\tkey o:{idempotency.json.id}\n\tstore memory\n}\nrespond ok")
	env := append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"adapt", "--config", typo, "--adapter", "caddyfile"}, "{idempotency.jsn.id}: unknown placeholder"},
		{[]string{"validate", "--config", typo, "--adapter", "caddyfile"}, "{idempotency.jsn.id}: unknown placeholder"},
		{[]string{"adapt", "--config", platform, "--adapter", "caddyfile"}, `unknown platform \"strpe\"; valid: alipay, generic, paypal`},
		{[]string{"validate", "--config", platform, "--adapter", "caddyfile"}, `unknown platform \"strpe\"; valid: alipay, generic, paypal`},
	} {
		out, err := run(c.args...)
		if err == nil {
			t.Errorf("%v succeeded; want it refused:\n%s", c.args, out)
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v: output does not contain %q:\n%s", c.args, c.want, out)
		}
	}
	if out, err := run("validate", "--config", good, "--adapter", "caddyfile"); err != nil {
		t.Errorf("validate refused a good config: %v\n%s", err, out)
	}
}
