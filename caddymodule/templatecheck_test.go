package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"
)

// templateCase is one route's templates and the refusal they must get.
type templateCase struct {
	name              string
	platform, key, fp string
	redirect, body    string
	success           string // a `success` line's arguments
	want              string // "" = accepted
	wantAlso          string // a second part of the message (the fix)
	verifyOff         bool
}

var templateCases = []templateCase{
	{name: "unclosed placeholder", key: "{idempotency.form.out_trade_no",
		want: `key "{idempotency.form.out_trade_no": the { at character 1 is never closed`, wantAlso: "close it ({idempotency.form.out_trade_no})"},
	{name: "unclosed after a prefix", key: "o:{idempotency.form.a}:{idempotency.form.b",
		want: "the { at character 24 is never closed", wantAlso: "{idempotency.form.b}"},
	{name: "unclosed before another", key: "{idempotency.form.a-{idempotency.form.b}",
		want: "the { at character 1 is not closed before the next {", wantAlso: "close it ({idempotency.form.a-})"},
	{name: "stray closing brace", key: "idempotency.form.out_trade_no}",
		want: "the } at character 30 closes no {", wantAlso: "{idempotency.form.out_trade_no}"},
	{name: "empty braces", key: "o:{}:{idempotency.form.a}", want: "{} at character 3 names no placeholder"},
	{name: "constant key", key: "order",
		want: `key "order" names no placeholder of the request, so every notification would get the same key`, wantAlso: "e.g. key {idempotency.form.out_trade_no}"},
	{name: "key from the environment only", key: "o:{env.HOME}", want: "names no placeholder of the request"},
	{name: "key from the clock", key: "{idempotency.form.a}:{time.now.unix}", want: "{time.now.unix} changes with every copy"},
	{name: "key from the request id", key: "{http.request.uuid}", want: "{http.request.uuid} changes with every copy"},
	{name: "preset key constant", platform: "stripe", verifyOff: true, key: "evt", want: "names no placeholder of the request"},
	{name: "fingerprint unclosed", key: "{idempotency.form.a}", fp: "{idempotency.form.total_amount",
		want: `fingerprint "{idempotency.form.total_amount": the { at character 1 is never closed`},
	{name: "redirect unclosed", key: "{idempotency.form.a}", redirect: "/paid?o={idempotency.form.a",
		want: `on_duplicate redirect "/paid?o={idempotency.form.a": the { at character 9 is never closed`},
	{name: "body placeholder unclosed", key: "{idempotency.form.a}", body: "paid {idempotency.key",
		want: `on_duplicate body "paid {idempotency.key": the { at character 6 is never closed`},

	{name: "escaped braces", key: `k:\{x\}:{idempotency.form.a}`},
	{name: "header key", key: "{http.request.header.Idempotency-Key}"},
	{name: "json body on duplicates", key: "{idempotency.form.a}", body: `{"code":"SUCCESS","message":{"text":"ok"}}`},
	{name: "text body with a placeholder", key: "{idempotency.form.a}", body: "dup {idempotency.key} {ok}"},
	{name: "preset without key", platform: "stripe", verifyOff: true},

	// A Caddy placeholder that does not exist is literal text, not a key.
	{name: "caddy placeholder typo", key: "{http.request.heder.X-Order}",
		want: "Caddy has no placeholder {http.request.heder.X-Order}", wantAlso: "did you mean {http.request.header.X-Order}?"},
	{name: "caddy query typo", key: "o:{http.request.uri.qery.id}",
		want: "Caddy has no placeholder {http.request.uri.qery.id}", wantAlso: "{http.request.uri.query.id}"},
	{name: "caddy unknown name", key: "o:{http.request.order_no}", want: "Caddy has no placeholder {http.request.order_no}"},
	{name: "caddy path part", key: "o:{http.request.uri.path.1}"},
	{name: "caddy host label and cookie", key: "{http.request.host.labels.0}:{http.request.cookie.sid}"},
	{name: "caddy tls field", key: "{http.request.tls.client.serial}:{http.request.header.X-Id}"},
	{name: "vars and regexp are open", key: "{http.vars.order}:{http.regexp.o.1}"},

	// A preset's hand-written key must keep the business event.
	{name: "alipay key without the event", platform: "alipay", verifyOff: true, key: "{idempotency.form.out_trade_no}",
		want:     "leaves out the business event, so the order's refunds and its close would share the payment's key",
		wantAlso: "{idempotency.order}:{idempotency.event}"},
	{name: "wechatpay_v2 key without the event", platform: "wechatpay_v2", verifyOff: true, key: "v2:{idempotency.xml.transaction_id}",
		want: "leaves out the business event"},
	{name: "alipay key with the event", platform: "alipay", verifyOff: true, key: "{idempotency.form.out_trade_no}:{idempotency.event}"},
	{name: "alipay key from a map of the event", platform: "alipay", verifyOff: true, key: "{idempotency.order}:{alipay_event}"},
	{name: "wechatpay without the APIv3 key names no events", platform: "wechatpay", verifyOff: true, key: "{idempotency.json.id}"},

	// A generic route keyed as an order's event needs a rule that says
	// the business ran.
	{name: "status query on any 2xx", key: "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid",
		want: "names an order's business event (paid)", wantAlso: "success 200 body PAID"},
	{name: "refund query on any 2xx", key: "{idempotency.form.o}:{idempotency.form.t}:refund:{idempotency.form.r}",
		want: "names an order's business event (refund:x)"},
	{name: "status query with a body rule", key: "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid", success: "200 body PAID",
		body: "PAID"},
	{name: "status query with a header rule", key: "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid",
		success: "2xx header X-Order-State paid", redirect: "/orders/{idempotency.json.trade_no}"},
	// ... and says what its callers get once the event ran elsewhere.
	{name: "status query without on_duplicate", key: "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid", success: "200 body PAID",
		want: "without on_duplicate they would get an empty 200", wantAlso: "on_duplicate respond 200"},

	// on_duplicate's placeholders are checked as a key's, inside JSON too.
	{name: "json body with a placeholder typo", key: "{idempotency.form.a}", body: `{"order":"{idempotency.jsn.id}","state":"paid"}`,
		want: "on_duplicate body: {idempotency.jsn.id}: unknown placeholder"},
	{name: "json body with a caddy placeholder typo", key: "{idempotency.form.a}", body: `{"order":"{http.request.uri.qery.o}"}`,
		want: "Caddy has no placeholder {http.request.uri.qery.o}", wantAlso: "did you mean {http.request.uri.query.o}?"},
	{name: "json body with placeholders", key: "{idempotency.form.a}", body: `{"order":"{idempotency.json.id}","k":"{http.request.uri.query.o}"}`},
	{name: "generic key that is no event", key: "{idempotency.json.app_id}:{idempotency.json.trade_no}:paid-ish"},
}

// caddyfileBlock is the case as a Caddyfile directive.
func (c templateCase) caddyfileBlock() string {
	var b strings.Builder
	b.WriteString("idempotency {\n\tstore memory\n")
	if c.platform != "" {
		b.WriteString("\tplatform " + c.platform + "\n")
	}
	if c.verifyOff {
		b.WriteString("\tverify off\n")
	}
	if c.key != "" {
		b.WriteString("\tkey `" + c.key + "`\n")
	}
	if c.fp != "" {
		b.WriteString("\tfingerprint `" + c.fp + "`\n")
	}
	if c.redirect != "" {
		b.WriteString("\ton_duplicate redirect `" + c.redirect + "`\n")
	}
	if c.body != "" {
		b.WriteString("\ton_duplicate respond 200 `" + c.body + "`\n")
	}
	if c.success != "" {
		b.WriteString("\tsuccess " + c.success + "\n")
	}
	b.WriteString("}\nrespond ok")
	return b.String()
}

// jsonConfig is the case as a JSON config, which no adapter has checked.
func (c templateCase) jsonConfig(t *testing.T) string {
	h := map[string]any{"handler": "idempotency", "store": map[string]any{"type": "memory"}}
	for k, v := range map[string]string{"platform": c.platform, "key": c.key, "fingerprint": c.fp} {
		if v != "" {
			h[k] = v
		}
	}
	if c.verifyOff {
		h["verify_off"] = true
	}
	if c.redirect != "" {
		h["on_duplicate"] = map[string]any{"redirect": c.redirect}
	}
	if c.body != "" {
		h["on_duplicate"] = map[string]any{"status": 200, "body": c.body}
	}
	if c.success != "" {
		h["success"] = successJSON(c.success)
	}
	cfg := map[string]any{"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"s": map[string]any{
		"listen": []string{"127.0.0.1:0"},
		"routes": []any{map[string]any{"handle": []any{h, map[string]any{"handler": "static_response", "body": "ok"}}}},
	}}}}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTemplateChecks: `adapt` refuses each broken template, naming the
// template, what is wrong and the fix; `validate` refuses the same
// template in a JSON config. Good templates pass both.
func TestTemplateChecks(t *testing.T) {
	check := func(t *testing.T, how string, err error, c templateCase) {
		t.Helper()
		switch {
		case c.want == "" && err != nil:
			t.Fatalf("%s refused a good template: %v", how, err)
		case c.want != "" && err == nil:
			t.Fatalf("%s accepted it; want an error containing %q", how, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Fatalf("%s: error %q does not contain %q", how, err, c.want)
		case c.wantAlso != "" && !strings.Contains(err.Error(), c.wantAlso):
			t.Fatalf("%s: error %q does not name the fix %q", how, err, c.wantAlso)
		}
	}
	for _, c := range templateCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := adaptSite(t, c.caddyfileBlock())
			check(t, "adapt", err, c)
			check(t, "validate", validateJSON(t, c.jsonConfig(t)), c)
		})
	}
}

// TestCheckBraces: the brace check pairs braces as Caddy's replacer does.
func TestCheckBraces(t *testing.T) {
	for _, c := range []struct {
		tmpl    string
		literal bool
		bad     bool
	}{
		{"", false, false},
		{"plain", false, false},
		{"{a.b}", false, false},
		{"{a.b}{c}", false, false},
		{`\{a.b\}`, false, false},
		{`{a.b\}}`, false, false}, // Caddy skips an escaped } when closing
		{"{a.b", false, true},
		{"a.b}", false, true},
		{"{a{b}", false, true},
		{"{}", false, true},
		{`{"a":{"b":1}}`, true, false},
		{"{ok}", true, false},
		{"{idempotency.key", true, true},
		{"x {idempotency.key} }", true, false},
	} {
		err := checkBraces(c.tmpl, c.literal)
		if (err != nil) != c.bad {
			t.Errorf("checkBraces(%q, literal %v) = %v; want bad %v", c.tmpl, c.literal, err, c.bad)
		}
	}
}

// successJSON is a `success` line's arguments as the handler's JSON.
func successJSON(line string) map[string]any {
	rule := map[string]any{}
	f := strings.Fields(line)
	var statuses []string
	for i := 0; i < len(f); i++ {
		switch f[i] {
		case "body":
			rule["body"] = f[i+1]
			i++
		case "header":
			rule["header"] = map[string]string{f[i+1]: f[i+2]}
			i += 2
		default:
			statuses = append(statuses, f[i])
		}
	}
	rule["statuses"] = statuses
	return rule
}
