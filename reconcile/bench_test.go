package reconcile

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billtest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/platforms/alipay/alipaybill"
	"github.com/idemgate/idemgate/platforms/stripe/stripebill"
	"github.com/idemgate/idemgate/store"
)

// BenchmarkReconcile1M reconciles a bill of a million rows (800,000
// payments, 200,000 partial refunds) against a real Redis holding the
// orders that ran (all but one in a hundred, which the report lists as
// settled, never run): time, and the peak of the Go heap while it runs,
// sampled every 5ms (the contract: under 100 MiB). The bill is written as
// it is read, so it never sits in memory. Filling Redis takes a few
// minutes; run it alone:
//
//	go test ./reconcile -run '^$' -bench Reconcile1M -benchtime 1x
//
// benchAlipayApp is the app_id of the bench's Alipay keys.
const benchAlipayApp = "2021004123456789"

func BenchmarkReconcile1M(b *testing.B) {
	const rows = 1_000_000
	rs := redistest.Start(b)
	st := store.NewRedis(rs.Client(), store.RedisOptions{})
	b.Cleanup(func() { st.Close() })
	day := time.Date(2026, 10, 3, 0, 0, 0, 0, time.FixedZone("CST", 8*3600))
	for _, c := range []struct {
		platform string
		bill     func(w io.Writer) billtest.Writer
		row      func(i int) (billtest.Row, string, *store.OrderRun)
	}{
		{"alipay", func(w io.Writer) billtest.Writer {
			return alipaybill.NewWriter(w, "20881021772966100156", day, day.Add(24*time.Hour))
		},
			func(i int) (billtest.Row, string, *store.OrderRun) {
				r, order, refund := benchRow(i, day, fmt.Sprintf("2026100322001458860%09d", i))
				key := "alipay:" + benchAlipayApp + ":" + order + ":paid"
				if refund != "" {
					key = "alipay:" + benchAlipayApp + ":" + order + ":refund:" + refund
				}
				return r, key, benchRun(r)
			}},
		{"stripe", func(w io.Writer) billtest.Writer { return stripebill.NewWriter(w, true) },
			func(i int) (billtest.Row, string, *store.OrderRun) {
				r, _, _ := benchRow(i, day, "")
				r.Currency = "USD"
				run := benchRun(r)
				run.Refs = []string{r.Order}
				if r.Kind == billtest.Refund {
					run.Refs = []string{r.Refund, r.Order}
				}
				return r, fmt.Sprintf("stripe:evt_%d", i), run
			}},
	} {
		b.Run(c.platform, func(b *testing.B) {
			fillStore(b, st, rows, c.row)
			env := Env{StoreID: "bench", Store: st}
			for range b.N {
				pr, pw := io.Pipe()
				go func() {
					w := c.bill(pw)
					for i := range rows {
						r, _, _ := c.row(i)
						_ = w.Row(r)
					}
					pw.CloseWithError(w.Close())
				}()
				runtime.GC()
				var base runtime.MemStats
				runtime.ReadMemStats(&base)
				peak, stop := sampleHeap()
				start := time.Now()
				rep, err := Run(context.Background(), env, Options{Platform: c.platform, Merchant: benchAlipayApp}, pr)
				took := time.Since(start)
				stop()
				if err != nil {
					b.Fatal(err)
				}
				if rep.Bill.Rows != rows || rep.SettledNeverRun.Count != rows/100 || rep.Matched.Count != rows-rows/100 {
					b.Fatalf("report: rows %d, settled never run %d, matched %d", rep.Bill.Rows, rep.SettledNeverRun.Count, rep.Matched.Count)
				}
				b.ReportMetric(float64(*peak)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(base.HeapAlloc)/(1<<20), "heap-before-MiB")
				b.ReportMetric(took.Seconds(), "s/1M-rows")
			}
		})
	}
}

// benchRow is row i of the bill: every fifth refunds part of the order two
// before it.
func benchRow(i int, day time.Time, trade string) (billtest.Row, string, string) {
	at := day.Add(time.Duration(i%86000) * time.Second)
	order, amount := i, int64(100+i*37%99900)
	r := billtest.Row{Kind: billtest.Payment, Amount: benchCents(amount), Currency: "CNY", Time: at, MerchantOrder: fmt.Sprintf("M%d", i)}
	refund := ""
	if i%5 == 4 {
		order = i - 2
		amount = max((100+int64(order)*37%99900)/2, 1)
		refund = fmt.Sprintf("R%d", i)
		r.Kind, r.Amount, r.Refund = billtest.Refund, benchCents(amount), refund
	}
	if trade == "" {
		r.Order = fmt.Sprintf("ch_%d", order)
		if refund != "" {
			r.Refund = "re_" + refund
		}
		return r, r.Order, r.Refund
	}
	r.Order = fmt.Sprintf("2026100322001458860%09d", order)
	return r, r.Order, refund
}

func benchRun(r billtest.Row) *store.OrderRun {
	run := &store.OrderRun{TTL: 24 * time.Hour, Amount: r.Amount, Currency: r.Currency, Settles: keying.SettlesPayment, At: r.Time}
	if r.Kind == billtest.Refund {
		run.Settles = keying.SettlesRefund
	}
	return run
}

// fillStore runs every row's event but one in a hundred, 64 at a time.
func fillStore(b *testing.B, s store.Store, rows int, row func(i int) (billtest.Row, string, *store.OrderRun)) {
	b.Helper()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= rows {
					return
				}
				if i%100 == 50 {
					continue
				}
				_, key, run := row(i)
				won, err := s.Claim(ctx, key, "", time.Minute)
				if err != nil || won.Outcome != store.Won {
					b.Errorf("claim %s: %+v %v", key, won, err)
					return
				}
				if err := s.Complete(ctx, key, won.Token, store.Answer{Status: 200, BodyCached: true, Order: run}, time.Minute, store.Journal{}); err != nil {
					b.Errorf("complete %s: %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("filled the store with %d events in %v", rows-rows/100, time.Since(start).Round(time.Second))
}

// sampleHeap records the largest HeapAlloc until stop.
func sampleHeap() (*uint64, func()) {
	var peak uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return &peak, func() { close(done); <-stopped }
}

// benchCents writes hundredths as an amount.
func benchCents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }
