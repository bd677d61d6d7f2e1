package caddymodule

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string // JSON of the handler
	}{
		{"empty block", `idempotency`, `{}`},
		{"generic", `idempotency {
			platform generic
			key order:{idempotency.form.out_trade_no}
			fingerprint {idempotency.form.total_amount}
		}`, `{"platform":{"name":"generic"},"key":"order:{idempotency.form.out_trade_no}","fingerprint":"{idempotency.form.total_amount}"}`},
		{"fingerprint off", `idempotency {
			fingerprint off
		}`, `{"fingerprint":"off"}`},
		{"store embedded default path", `idempotency {
			store embedded
		}`, `{"store":{"type":"embedded"}}`},
		{"store embedded path", `idempotency {
			store embedded /var/lib/idemgate/keys.db
		}`, `{"store":{"type":"embedded","path":"/var/lib/idemgate/keys.db"}}`},
		{"store memory", `idempotency {
			store memory
		}`, `{"store":{"type":"memory"}}`},
		{"store redis single", `idempotency {
			store redis 127.0.0.1:6379
		}`, `{"store":{"type":"redis","addresses":["127.0.0.1:6379"]}}`},
		{"store redis cluster with options", `idempotency {
			store redis 10.0.0.1:7000 10.0.0.2:7000 10.0.0.3:7000 {
				username gw
				password {env.REDIS_PASSWORD}
				tls
				prefix pay
				pool_size 20
			}
		}`, `{"store":{"type":"redis","addresses":["10.0.0.1:7000","10.0.0.2:7000","10.0.0.3:7000"],"username":"gw","password":"{env.REDIS_PASSWORD}","tls":true,"prefix":"pay","pool_size":20}}`},
		{"store redis wait_replicas", `idempotency {
			store redis 127.0.0.1:6379 {
				wait_replicas 1 500ms
			}
		}`, `{"store":{"type":"redis","addresses":["127.0.0.1:6379"],"wait_replicas":1,"wait_timeout":500000000}}`},
		{"store redis sentinel", `idempotency {
			store redis rediss://s1:26379 rediss://s2:26379 {
				master_name mymaster
				db 2
			}
		}`, `{"store":{"type":"redis","addresses":["rediss://s1:26379","rediss://s2:26379"],"master_name":"mymaster","db":2}}`},
		{"durations", `idempotency {
			lock_ttl 45s
			ttl 30d
			store_timeout 500ms
		}`, `{"lock_ttl":45000000000,"ttl":2592000000000000,"store_timeout":500000000}`},
		{"in_flight wait", `idempotency {
			in_flight wait 3s
		}`, `{"in_flight":"wait","in_flight_wait":3000000000}`},
		{"in_flight wait default", `idempotency {
			in_flight wait
		}`, `{"in_flight":"wait"}`},
		{"in_flight reject", `idempotency {
			in_flight reject
		}`, `{"in_flight":"reject"}`},
		{"on_store_error pass", `idempotency {
			on_store_error pass
		}`, `{"on_store_error":"pass"}`},
		{"sizes", `idempotency {
			max_body 256KiB
			max_answer 4KB
		}`, `{"max_body":262144,"max_answer":4000}`},
		{"success codes", `idempotency {
			success 2xx 302
		}`, `{"success":{"statuses":["2xx","302"]}}`},
		{"success body", `idempotency {
			success 200 body success
		}`, `{"success":{"statuses":["200"],"body":"success"}}`},
		{"on_duplicate redirect", `idempotency {
			on_duplicate redirect https://shop.example/paid?order={idempotency.form.out_trade_no}
		}`, `{"on_duplicate":{"redirect":"https://shop.example/paid?order={idempotency.form.out_trade_no}"}}`},
		{"on_duplicate respond", `idempotency {
			on_duplicate respond 200 success
		}`, `{"on_duplicate":{"status":200,"body":"success"}}`},
		{"secrets", `idempotency {
			platform wechatpay
			secret {env.WECHATPAY_APIV3_KEY}
			public_key /etc/idemgate/wechatpay_pub.pem
			public_key_id PUB_KEY_ID_0114232134912410000000000000
			certificate /etc/a.pem /etc/b.pem
		}`, `{"platform":{"certificates":["/etc/a.pem","/etc/b.pem"],"name":"wechatpay","public_key":"/etc/idemgate/wechatpay_pub.pem","public_key_id":"PUB_KEY_ID_0114232134912410000000000000","secret":"{env.WECHATPAY_APIV3_KEY}"}}`},
		{"paypal", `idempotency {
			platform paypal
			webhook_id 1JE4291016473214C
		}`, `{"platform":{"name":"paypal","webhook_id":"1JE4291016473214C"}}`},
		{"alipay pinned app", `idempotency {
			platform alipay
			app_id 2016091800538339 2021000000000001
		}`, `{"platform":{"app_id":["2016091800538339","2021000000000001"],"name":"alipay"}}`},
		{"alipay return display", `idempotency {
			platform alipay
			return display
		}`, `{"platform":{"name":"alipay","return":"display"}}`},
		{"wechatpay pinned merchant, tolerance", `idempotency {
			platform wechatpay
			mchid 1230000109
			tolerance 10m
		}`, `{"platform":{"mchid":["1230000109"],"name":"wechatpay"},"tolerance":600000000000}`},
		{"generic joining a preset's scope", `idempotency {
			key {http.request.header.Idempotency-Key}
			scope standard_webhooks
		}`, `{"key":"{http.request.header.Idempotency-Key}","scope":"standard_webhooks"}`},
		{"verify off, logs", `idempotency {
			platform stripe
			verify off
			log_keys
			warn_copies 10
		}`, `{"platform":{"name":"stripe"},"verify_off":true,"log_keys":true,"warn_copies":10}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input)); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			got, err := json.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, string(got), tt.want) {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"unknown subdirective", "idempotency {\n\tplatform generic\n\tkeys x\n}", `unknown subdirective "keys"`},
		{"duplicate subdirective", "idempotency {\n\tkey a\n\tkey b\n}", `duplicate subdirective "key"`},
		{"inline argument", `idempotency foo`, "wrong argument count"},
		{"key without template", "idempotency {\n\tkey\n}", "wrong argument count"},
		{"key with two", "idempotency {\n\tkey a b\n}", "wrong argument count"},
		{"bad duration", "idempotency {\n\tlock_ttl soon\n}", `bad duration "soon"`},
		{"negative duration", "idempotency {\n\tttl -5s\n}", "must be positive"},
		{"in_flight bad mode", "idempotency {\n\tin_flight maybe\n}", "want wait [<duration>] or reject"},
		{"in_flight reject with duration", "idempotency {\n\tin_flight reject 5s\n}", "wrong argument count"},
		{"on_store_error bad", "idempotency {\n\ton_store_error ignore\n}", "want fail_closed or pass"},
		{"bad size", "idempotency {\n\tmax_body lots\n}", `bad size "lots"`},
		{"replay_cache gone", "idempotency {\n\tstore redis 127.0.0.1:6379 {\n\t\treplay_cache 500\n\t}\n}", `store redis: unknown option "replay_cache"`},
		{"store unknown", "idempotency {\n\tstore mongo\n}", "want embedded, memory or redis"},
		{"store redis no address", "idempotency {\n\tstore redis\n}", "at least one address"},
		{"store memory with arg", "idempotency {\n\tstore memory x\n}", "wrong argument count"},
		{"store embedded options", "idempotency {\n\tstore embedded {\n\t\tprefix x\n\t}\n}", "takes no options"},
		{"store redis unknown option", "idempotency {\n\tstore redis a:1 {\n\t\tsentinel x\n\t}\n}", `unknown option "sentinel"`},
		{"store redis db not a number", "idempotency {\n\tstore redis a:1 {\n\t\tdb two\n\t}\n}", "wants a number"},
		{"store redis duplicate option", "idempotency {\n\tstore redis a:1 {\n\t\tdb 1\n\t\tdb 2\n\t}\n}", `duplicate option "db"`},
		{"success nothing", "idempotency {\n\tsuccess\n}", "at least one status"},
		{"success bad class", "idempotency {\n\tsuccess 6xx\n}", `"6xx" is not a status code`},
		{"success body missing", "idempotency {\n\tsuccess 200 body\n}", "body wants a text"},
		{"on_duplicate bad", "idempotency {\n\ton_duplicate ignore\n}", "want redirect or respond"},
		{"on_duplicate respond bad status", "idempotency {\n\ton_duplicate respond ok\n}", `bad status "ok"`},
		{"verify on", "idempotency {\n\tverify on\n}", "only `verify off`"},
		{"certificate none", "idempotency {\n\tcertificate\n}", "wrong argument count"},
		{"warn_copies zero", "idempotency {\n\twarn_copies 0\n}", "positive number"},
		{"log_keys arg", "idempotency {\n\tlog_keys yes\n}", "wrong argument count"},
		{"tolerance bad", "idempotency {\n\ttolerance a while\n}", `bad duration "a"`},
		{"tolerance negative", "idempotency {\n\ttolerance -1m\n}", "must be positive"},
		{"app_id none", "idempotency {\n\tapp_id\n}", "wrong argument count"},
		{"mchid none", "idempotency {\n\tmchid\n}", "wrong argument count"},
		{"return none", "idempotency {\n\treturn\n}", "wrong argument count"},
		{"return unknown", "idempotency {\n\treturn page\n}", "business, display or refuse"},
		{"scope none", "idempotency {\n\tscope\n}", "wrong argument count"},
		{"scope two", "idempotency {\n\tscope a b\n}", "wrong argument count"},
		{"scope with a colon", "idempotency {\n\tscope stripe:x\n}", "no ':'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input))
			if err == nil {
				t.Fatalf("want an error containing %q, got none", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			// Errors name the line, so an operator finds the mistake.
			if !regexp.MustCompile(`Testfile:\d+`).MatchString(err.Error()) {
				t.Errorf("error %q does not name a line", err)
			}
		})
	}
}

// TestAdaptOrder checks that the directive sorts before reverse_proxy with
// no global `order` option.
func TestAdaptOrder(t *testing.T) {
	input := `:8080 {
	reverse_proxy 127.0.0.1:9090
	idempotency {
		key k:{http.request.header.X-Id}
		store memory
	}
}`
	adapter := caddyfileAdapter()
	out, warnings, err := adapter.Adapt([]byte(input), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warnings {
		t.Logf("warning: %v", w)
	}
	s := string(out)
	i, j := strings.Index(s, `"handler":"idempotency"`), strings.Index(s, `"handler":"reverse_proxy"`)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("idempotency must come before reverse_proxy in:\n%s", s)
	}
	if !strings.Contains(s, `"key":"k:{http.request.header.X-Id}"`) {
		t.Errorf("key template not carried through:\n%s", s)
	}
}

func caddyfileAdapter() caddyfile.Adapter {
	return caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
