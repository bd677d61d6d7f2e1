package command

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
)

func TestInert(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"alipay:2021:T1:paid", "alipay:2021:T1:paid"},
		{"订单 1\tpaid\n", "订单 1\tpaid\n"},
		{"k\x1b[2J\x1b]0;pwned\x07", `k\x1b[2J\x1b]0;pwned\x07`},
		{"k\u009b31m", `k\u009b31m`},     // C1 CSI, two bytes in UTF-8
		{"pay\u202eusd", `pay\u202eusd`}, // right-to-left override
		{"k\xff\x9bx", `k\xff\x9bx`},     // not UTF-8
		{"del\x7f\r", `del\x7f\x0d`},     // DEL, and a carriage return that would overwrite the line
	} {
		if got := inert(c.in); got != c.want {
			t.Errorf("inert(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestInertWriterSplitRunes: a character cut between two writes is kept
// whole, escaped or not.
func TestInertWriterSplitRunes(t *testing.T) {
	var out bytes.Buffer
	w := &inertWriter{w: &out}
	in := []byte("订\u009bx")
	for i := range in {
		if _, err := w.Write(in[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	w.flush()
	if got := out.String(); got != `订\u009bx` {
		t.Fatalf("wrote %q", got)
	}
	out.Reset()
	w.Write([]byte{0xe8, 0xae}) // a character that never ends
	w.flush()
	if got := out.String(); got != `\xe8\xae` {
		t.Fatalf("wrote %q for a cut character", got)
	}
}

// TestCLIOutputIsInert: a notification whose key holds terminal escapes is
// refused at the gateway (400, never forwarded); a record that holds such
// a key all the same (written by another writer of the shared store) is
// listed, inspected and named in errors with its escapes made visible, so
// the operator's terminal is never steered.
func TestCLIOutputIsInert(t *testing.T) {
	rs := redistest.Start(t)
	be := gatewaytest.NewBackend(t)
	g := gatewaytest.StartGateway(t, gatewaytest.NotifyRoute, "{store}", "store redis "+rs.Addr(), "{backend}", be.Addr(), "{extra}", "")
	addr := []string{"--address", g.Admin}
	const evil = "o\x1b[2J\x1b]0;pwned\x07\u009b31m"

	if r := gatewaytest.Notify(t, g.Base, evil); r.Status != 400 || be.Total.Load() != 0 {
		t.Fatalf("a key with control characters: %d, backend ran %d times; want 400 and never forwarded", r.Status, be.Total.Load())
	}

	st := store.NewRedis(redis.NewClient(&redis.Options{Addr: rs.Addr()}), store.RedisOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := "demo:" + evil
	res, err := st.Claim(ctx, key, "", time.Minute)
	if err != nil || res.Outcome != store.Won {
		t.Fatalf("claim: %v %v", res.Outcome, err)
	}
	if err := st.Complete(ctx, key, res.Token, store.Answer{Status: 200, Body: []byte("ok\x1b[5m")}, time.Hour, store.Journal{}); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"list", "--state", "answered", "--scope", "demo"},
		{"inspect", "--body", key},
		{"list", "--state", "answered", "--scope", "demo", "--json"},
	} {
		out, err := runCLI(t, append(args, addr...)...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Fatalf("%v printed control characters raw:\n%q", args, out)
		}
		if !strings.Contains(out, `\x1b[2J`) && !strings.Contains(out, `\u001b[2J`) {
			t.Fatalf("%v does not show the key's escapes visibly:\n%s", args, out)
		}
	}
	// An error that names the key (a purge refused for another reason
	// would do; an unknown key is simplest) is inert too.
	_, err = runCLI(t, append([]string{"purge", "demo:x\x1b[2J"}, addr...)...)
	if err == nil || strings.ContainsRune(err.Error(), 0x1b) || !strings.Contains(err.Error(), `\x1b[2J`) {
		t.Fatalf("purge error: %v", err)
	}
}
