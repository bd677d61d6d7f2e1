package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/platforms/wechatpay/wechatpaybill"
	"github.com/idemgate/idemgate/store"
)

// TestRunAnsweredWithoutOrderEvent: a payment whose record is answered
// but whose order lacks its event (stored by a settle a store outage had
// deferred, before that settle wrote the order) ran: it is matched, never
// "settled, never run", and no item proposes --force; a payment that
// failed is still settled, never run, with its plain redelivery.
func TestRunAnsweredWithoutOrderEvent(t *testing.T) {
	const mch = "1900000109"
	day := time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC)
	txn := func(i int) string { return fmt.Sprintf("4200000925202610030%09d", i) }
	ctx := context.Background()
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	note := store.Journal{Notification: &store.Notification{Method: "POST", URI: "/notify", Body: []byte("{}"), BodySize: 2}}
	settle := func(i int, ok bool) {
		t.Helper()
		key := "wechatpay:" + mch + ":" + txn(i) + ":paid"
		won, err := st.Claim(ctx, key, "", time.Minute)
		if err != nil || won.Outcome != store.Won {
			t.Fatalf("claim %s: %+v %v", key, won, err)
		}
		if ok {
			// No Order: the record alone, as the deferred settle stored it.
			err = st.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true}, time.Hour, note)
		} else {
			err = st.Release(ctx, key, won.Token, time.Hour, note)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	settle(1, true)
	settle(2, false)
	var b bytes.Buffer
	w := wechatpaybill.NewWriter(&b)
	for _, i := range []int{1, 2} {
		if err := w.Row(billtest.Row{Kind: billtest.Payment, Order: txn(i), MerchantOrder: fmt.Sprintf("M%d", i), Amount: "10.00",
			Currency: "CNY", Time: day, Merchant: mch}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	env := Env{StoreID: "mem", Store: st, Now: func() time.Time { return day.Add(30 * time.Hour) },
		Routes: func(string) []Route { return []Route{{Platform: "wechatpay", Merchants: []string{mch}}} }}
	rep, err := Run(ctx, env, Options{Platform: "wechatpay", Matched: true}, &b)
	if err != nil {
		t.Fatal(err)
	}
	wantCategories(t, "", rep, func(it Item) string {
		return strings.TrimPrefix(it.Order, "wechatpay:"+mch+":4200000925202610030") + "/" + it.State
	}, map[string]string{
		"matched":           "1 map[CNY:10.00] [000000001/answered]",
		"settled_never_run": "1 map[CNY:10.00] [000000002/failed]",
	})
	if it := rep.SettledNeverRun.Items[0]; it.Redeliver != "idemgate idempotency redeliver '"+it.Key+"'" {
		t.Errorf("the failed payment's redelivery: %q", it.Redeliver)
	}
	j, _ := json.Marshal(rep)
	if strings.Contains(string(j), "--force") {
		t.Errorf("the report proposes --force: %s", j)
	}
}
