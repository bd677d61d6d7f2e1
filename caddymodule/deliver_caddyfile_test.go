package caddymodule

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestDeliverCaddyfile: `deliver` adapts to the handler's JSON.
func TestDeliverCaddyfile(t *testing.T) {
	tests := []struct{ name, input, want string }{
		{"sync", "idempotency {\n\tdeliver sync\n}", `{"deliver":{"mode":"sync"}}`},
		{"async minimal", "idempotency {\n\tplatform alipay\n\tdeliver async {\n\t\tto http://127.0.0.1:9000\n\t}\n}",
			`{"platform":{"name":"alipay"},"deliver":{"mode":"async","to":"http://127.0.0.1:9000"}}`},
		{"async everything", `idempotency {
			key {idempotency.json.id}
			deliver async {
				to https://legacy.internal/base
				ack 202 "<ok/>"
				concurrency 8
				rate 200/s
				retry 2s 5m
				give_up 12h
				durability replicas 1
			}
		}`, `{"key":"{idempotency.json.id}","deliver":{"mode":"async","to":"https://legacy.internal/base",
			"ack":{"status":202,"body":"<ok/>"},"concurrency":8,"rate":200,"retry_initial":2000000000,
			"retry_max":300000000000,"give_up":43200000000000,"replicas":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input)); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(h)
			if !jsonEqual(t, string(got), tt.want) {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	errs := []struct{ name, input, want string }{
		{"no mode", "idempotency {\n\tdeliver\n}", "wrong argument count"},
		{"bad mode", "idempotency {\n\tdeliver later\n}", "want sync or async"},
		{"sync with options", "idempotency {\n\tdeliver sync {\n\t\tto http://a\n\t}\n}", "takes no options"},
		{"async without to", "idempotency {\n\tdeliver async {\n\t\tconcurrency 2\n\t}\n}", "needs `to <url>`"},
		{"unknown option", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tworkers 2\n\t}\n}", `unknown option "workers"`},
		{"duplicate option", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tto http://b\n\t}\n}", `duplicate option "to"`},
		{"ack not 2xx", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tack 500\n\t}\n}", "must be 2xx"},
		{"rate without /s", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\trate 200\n\t}\n}", "wants <n>/s"},
		{"retry one", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tretry 1s\n\t}\n}", "retry <initial> <max>"},
		{"retry reversed", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tretry 1m 1s\n\t}\n}", "shorter than initial"},
		{"concurrency zero", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tconcurrency 0\n\t}\n}", "positive number"},
		{"durability bad", "idempotency {\n\tdeliver async {\n\t\tto http://a\n\t\tdurability fsync\n\t}\n}", "durability replicas <n>"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestDeliverProvision: what provisioning an async route checks, and the
// acks the presets get.
func TestDeliverProvision(t *testing.T) {
	provision := func(h *Handler) error {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		defer cancel()
		err := h.Provision(ctx)
		if err == nil {
			err = h.Validate()
		}
		h.Cleanup()
		return err
	}
	async := func(extra ...string) *DeliverConfig {
		c := &DeliverConfig{Mode: "async", To: "http://127.0.0.1:9"}
		if len(extra) > 0 {
			c.To = extra[0]
		}
		return c
	}
	memory := &StoreConfig{Type: "memory"}
	refused := []struct {
		name string
		h    *Handler
		want string
	}{
		{"generic without ack", &Handler{Key: "{idempotency.form.id}", Store: memory, Deliver: async()}, "needs `ack <status> [<body>]`"},
		{"to not a URL", &Handler{Platform: "stripe", VerifyOff: true, Store: memory, Deliver: async("legacy:9000")}, "http:// or https:// URL"},
		{"on_store_error pass", &Handler{Platform: "stripe", VerifyOff: true, Store: memory, OnStoreError: "pass", Deliver: async()}, "on_store_error pass"},
		{"replicas on memory", &Handler{Platform: "stripe", VerifyOff: true, Store: memory,
			Deliver: &DeliverConfig{Mode: "async", To: "http://a", Replicas: 1}}, "for a redis store"},
		{"replicas beyond wait_replicas", &Handler{Platform: "stripe", VerifyOff: true,
			Store:   &StoreConfig{Type: "redis", Addresses: []string{"127.0.0.1:1"}, WaitReplicas: 1},
			Deliver: &DeliverConfig{Mode: "async", To: "http://a", Replicas: 2}}, "wait_replicas to be at least 2"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if err := provision(tt.h); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	for platform, want := range map[string]AckAnswer{
		"alipay":       {Status: 200, Body: "success", ContentType: "text/plain; charset=utf-8"},
		"wechatpay":    {Status: 200},
		"wechatpay_v2": {Status: 200, Body: "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>", ContentType: "application/xml"},
		"stripe":       {Status: 200},
		"paypal":       {Status: 200},
	} {
		t.Run("ack "+platform, func(t *testing.T) {
			h := &Handler{Platform: platform, VerifyOff: true, Store: memory, Deliver: async()}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			if err := h.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			defer h.Cleanup()
			if h.dlv.ack != want {
				t.Errorf("ack %+v, want %+v", h.dlv.ack, want)
			}
			if h.retryWindow() != h.dlv.giveUp {
				t.Errorf("retry window %v, want give_up %v (dead after give_up)", h.retryWindow(), h.dlv.giveUp)
			}
		})
	}
	h := &Handler{Key: "{idempotency.form.id}", Store: memory, Deliver: async()}
	h.Deliver.Ack = &AckAnswer{Status: 200, Body: `{"ok":true}`}
	if err := provision(h); err != nil {
		t.Fatal(err)
	}
	dc := h.dlv.cfg
	if h.dlv.ack.ContentType != "application/json" || dc.Concurrency != 4 || dc.RetryInitial.String() != "1s" || dc.RetryMax.String() != "10m0s" ||
		dc.GiveUp.String() != "24h0m0s" || h.dlv.concurrency != dc.Concurrency || h.dlv.giveUp != dc.GiveUp {
		t.Errorf("defaults: %+v, engine %+v", *h.dlv, dc)
	}
}

// TestDeliverScopeShared: two async routes of one scope in one config share
// its queue, so a config where they deliver it differently is refused; the
// same routes delivering alike load, and a reload may change the one route
// of a scope.
func TestDeliverScopeShared(t *testing.T) {
	route := func(path, to string) string {
		return `
	handle ` + path + ` {
		idempotency {
			key {idempotency.form.id}
			scope shared
			store memory
			deliver async {
				to ` + to + `
				ack 200 ok
			}
		}
	}`
	}
	port := freePort(t)
	config := func(routes ...string) []byte {
		cf := "{\n\tadmin off\n\tauto_https off\n}\nhttp://127.0.0.1:" + itoa(port) + " {" + strings.Join(routes, "") + "\n}\n"
		cfgJSON, _, err := caddyfileAdapter().Adapt([]byte(cf), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfgJSON
	}
	t.Cleanup(func() { caddy.Stop() })
	err := caddy.Load(config(route("/a", "http://127.0.0.1:9001"), route("/b", "http://127.0.0.1:9002")), true)
	if err == nil || !strings.Contains(err.Error(), `scope "shared" is already delivered by another route of this config`) {
		t.Fatalf("two routes of one scope delivering to two backends: %v", err)
	}
	if err := caddy.Load(config(route("/a", "http://127.0.0.1:9001"), route("/b", "http://127.0.0.1:9001")), true); err != nil {
		t.Fatalf("two routes of one scope delivering alike: %v", err)
	}
	if err := caddy.Load(config(route("/a", "http://127.0.0.1:9002")), true); err != nil {
		t.Fatalf("a reload that moves the scope's one route to another backend: %v", err)
	}
}
