package caddymodule

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	adminapi "github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/reconcile"
)

// TestAsyncStateEverySurface, on the built binary: an Alipay payment
// acked by a deliver async route whose backend is down (connection
// refused, the next attempt a minute away) reads retrying, the same word,
// on its key, in the in-flight list, in search, on its order's page and
// in a reconciliation's items, through the admin API, the CLI and the
// console alike; never in_flight ("its first copy is at the backend").
func TestAsyncStateEverySurface(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	a := newAlipayOrders(t)
	gw, admin, _ := startProcAdmin(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+a.pub+`
			scope shop
			store memory
			deliver async {
				to http://`+down+`
				retry 1m 1m
				give_up 1h
			}
		}
	}
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`)
	awaitQueue(t, admin)
	const trade = "2026031422001437971000000301"
	if r := send(t, gw.base, "async", a.notify(trade, "TRADE_SUCCESS")); r.status != 200 || r.body != "success" {
		t.Fatalf("ack: %d %q", r.status, r.body)
	}
	order := "shop:" + testAlipayAppID + ":" + trade
	key := order + ":paid"
	get := func(path string, v any) {
		t.Helper()
		resp, err := freshClient.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != 200 || json.Unmarshal(b, v) != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
	var rec adminapi.RecordView
	eventually(t, 10*time.Second, "the key retrying on its page", func() bool {
		rec = adminapi.RecordView{}
		get(keyURI(key), &rec)
		return rec.State == "retrying" && rec.NextAttempt != nil
	})
	if len(rec.Attempts) == 0 || rec.Attempts[0].Error != "connection refused" {
		t.Fatalf("the key's page: %+v", rec)
	}

	// The admin API's surfaces.
	var page adminapi.PageView
	get("/idempotency/keys?state=in_flight", &page)
	if len(page.Keys) != 1 || page.Keys[0].Key != key || page.Keys[0].State != "retrying" {
		t.Errorf("in-flight list: %+v, want the key retrying", page.Keys)
	}
	var sv adminapi.SearchView
	get("/idempotency/search?q="+url.QueryEscape(order), &sv)
	if len(sv.Matches) != 1 || sv.Matches[0].Key != key || string(sv.Matches[0].State) != "retrying" {
		t.Errorf("search: %+v, want the key retrying", sv.Matches)
	}
	var ov adminapi.OrderView
	get("/idempotency/orders/"+url.PathEscape(order), &ov)
	if len(ov.Events) != 1 || ov.Events[0].Key != key || ov.Events[0].State != "retrying" {
		t.Errorf("order page: %+v, want the key retrying", ov.Events)
	}
	now := time.Now().Truncate(time.Second)
	bill := billtest.Bytes(func(w io.Writer) billtest.Writer {
		return alipaybill.NewWriter(w, "20881021772966100156", now.Add(-12*time.Hour), now.Add(12*time.Hour))
	}, []billtest.Row{{Kind: billtest.Payment, Order: trade, MerchantOrder: "o-" + trade, Amount: "88.88", Currency: "CNY", Time: now}})
	resp, err := freshClient.Post("http://"+admin+"/idempotency/reconcile?platform=alipay&scope=shop", "text/csv", bytes.NewReader(bill))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep reconcile.Report
	if resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("reconcile: %d %s", resp.StatusCode, b)
	}
	items := rep.SettledNeverRun.Items
	if len(items) != 1 || items[0].Key != key || items[0].State != "retrying" {
		t.Errorf("reconciliation's settled, never run: %+v, want the key retrying\n%s", items, b)
	}

	// The console's pages.
	console := func(method, path, ctype string, body io.Reader) string {
		t.Helper()
		req, err := http.NewRequest(method, gw.base+"/console/"+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := freshClient.Do(req)
		if err != nil {
			t.Fatalf("%s console/%s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if resp.StatusCode != 200 {
			t.Fatalf("%s console/%s: %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	form := console(http.MethodGet, "reconcile", "", nil)
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form)
	if token == nil {
		t.Fatalf("the reconcile form has no token:\n%s", form)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for _, f := range [][2]string{{"csrf", token[1]}, {"platform", "alipay"}, {"scope", "shop"}} {
		mw.WriteField(f[0], f[1])
	}
	fw, _ := mw.CreateFormFile("bill", "bill.csv")
	fw.Write(bill)
	mw.Close()
	sq := url.Values{"store": {rec.Store}}
	for name, html := range map[string]string{
		"key page":       console(http.MethodGet, "key?"+url.Values{"store": {rec.Store}, "k": {key}}.Encode(), "", nil),
		"overview lists": console(http.MethodGet, "", "", nil),
		"search":         console(http.MethodGet, "search?"+url.Values{"q": {order}}.Encode(), "", nil),
		"order page":     console(http.MethodGet, "order?"+sq.Encode()+"&o="+url.QueryEscape(order), "", nil),
		"reconciliation": console(http.MethodPost, "reconcile", mw.FormDataContentType(), &mp),
	} {
		if !strings.Contains(html, `<span class="badge retrying"`) || strings.Contains(html, `badge in_flight`) {
			t.Errorf("console %s: want the key retrying, never in_flight:\n%s", name, html)
		}
	}

	// The CLI's, for people.
	billFile := filepath.Join(t.TempDir(), "bill.csv")
	if err := os.WriteFile(billFile, bill, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", key},
		{"list", "--state", "in_flight"},
		{"in-flight"},
		{"search", order},
		{"order", order},
		{"reconcile", "--platform", "alipay", "--scope", "shop", "--bill", billFile, "--items"},
	} {
		cmd := exec.Command(binPath, append(append([]string{"idempotency"}, args...), "--address", admin)...)
		out, _ := cmd.CombinedOutput() // reconcile exits 1: the bill and what ran differ
		var line string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "retrying") || strings.Contains(l, "in_flight") && !strings.Contains(l, "--state") {
				line += l + "\n"
			}
		}
		if !strings.Contains(line, "retrying") || strings.Contains(line, "in_flight") {
			t.Errorf("idemgate idempotency %s: want the key retrying, never in_flight:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestAsyncStateListedOnAnotherInstance: two gateway processes share
// Redis; the one that took an async key is retrying it (its backend
// down). The other instance's in-flight list, from the admin API and on
// the console's overview, reads it retrying as its key page does there
// (a listing carries no journal: the key is read whole), not queued.
func TestAsyncStateListedOnAnotherInstance(t *testing.T) {
	testenv.Slow(t, "runs the built idemgate binary")
	rs := redistest.StartAOF(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	site := asyncProcSite("two", "store redis "+rs.Addr(), down, "retry 1m 1m\n\t\t\t\tgive_up 1h") + `
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`
	a, adminA, _ := startProcAdmin(t, site)
	awaitQueue(t, adminA)
	sendAll(t, []string{a.base}, []string{"l-1"}, 1)
	getJSON := func(admin, path string, v any) {
		t.Helper()
		resp, err := freshClient.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != 200 || json.Unmarshal(b, v) != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
	var rec adminapi.RecordView
	eventually(t, 10*time.Second, "the key retrying on the instance that took it", func() bool {
		rec = adminapi.RecordView{}
		getJSON(adminA, keyURI("two:l-1"), &rec)
		// Its engine knows before the store has the attempt.
		return rec.State == "retrying" && rec.NextAttempt != nil && len(rec.Attempts) > 0
	})
	b, adminB, _ := startProcAdmin(t, site)
	awaitQueue(t, adminB)
	// A's engine knew of the attempt before the store had it: B reads the
	// store, so it may take a moment to see it.
	var page adminapi.PageView
	eventually(t, 10*time.Second, "the other instance reading the key retrying", func() bool {
		rec, page = adminapi.RecordView{}, adminapi.PageView{}
		getJSON(adminB, keyURI("two:l-1"), &rec)
		return rec.State == "retrying"
	})
	getJSON(adminB, "/idempotency/keys?state=in_flight", &page)
	if rec.State != "retrying" || len(page.Keys) != 1 || page.Keys[0].State != rec.State {
		t.Errorf("on the other instance: key page %q, in-flight list %+v; want both retrying", rec.State, page.Keys)
	}
	resp, err := freshClient.Get(b.base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if !strings.Contains(string(html), `<span class="badge retrying"`) || strings.Contains(string(html), `<span class="badge queued"`) {
		t.Errorf("the other instance's console does not list the key retrying")
	}
}
