//go:build linux

package store

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The embedded store's start-up at scale: NewEmbedded on a file of
// -open-keys answered keys, each journaled with a ~1 KiB JSON notification
// (about the size per key of a file filled through the gateway), timed
// from the call to the store being ready, with the process's CPU time
// (user + system) and its major page faults:
//
//	go test ./store -run '^$' -bench BenchmarkEmbeddedOpen -benchtime 3x -timeout 30m
//
// "crash" opens the file as a process that did not close it leaves it
// (its last commit wrote no freelist), "clean" as Close leaves it. "warm"
// has the file in the page cache; "cold" drops it first (written back and
// dropped with posix_fadvise), as after a reboot, or when the fill pushed
// the file out of a memory-limited container's cache.
var openKeys = flag.Int("open-keys", 1000000, "answered keys in BenchmarkEmbeddedOpen's file")

func BenchmarkEmbeddedOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "open.db")
	fillOpenFile(b, path, *openKeys)
	if fi, err := os.Stat(path); err == nil {
		b.Logf("%d keys: %.2f GB", *openKeys, float64(fi.Size())/1e9)
	}
	for _, state := range []string{"crash", "clean"} {
		for _, cache := range []string{"warm", "cold"} {
			b.Run(state+"/"+cache, func(b *testing.B) {
				var cpu time.Duration
				var faults int64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if cache == "cold" {
						dropCache(b, path)
					} else {
						cacheFile(b, path)
					}
					u0, f0 := rusage(b)
					b.StartTimer()
					s, err := NewEmbedded(path, EmbeddedOptions{})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					u1, f1 := rusage(b)
					cpu += u1 - u0
					faults += f1 - f0
					if state == "crash" {
						s.crash()
					} else if err := s.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(faults)/float64(b.N), "majflt/op")
			})
		}
	}
}

// fillOpenFile writes n answered, journaled keys in the store's layout, in
// batched transactions, and leaves the file as a crashed process would.
func fillOpenFile(b *testing.B, path string, n int) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	r := rand.New(rand.NewPCG(1, 2))
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"Mozilla/4.0"}}
	t := time.Now()
	for i := 0; i < n; i += 10000 {
		err := db.Update(func(tx *bolt.Tx) error {
			for _, bk := range [][]byte{bucketRecords, bucketInFlight, bucketExpiry, bucketMeta,
				bucketIxInFlight, bucketIxAnswered, bucketIxFailed, bucketOrders, bucketOrderDays, bucketOrderRefs} {
				if _, err := tx.CreateBucketIfNotExists(bk); err != nil {
					return err
				}
			}
			for j := i; j < min(i+10000, n); j++ {
				k := "fill:" + strconv.Itoa(j)
				// A JSON notification of ~1 KiB whose ids and signature
				// do not compress away.
				sig := make([]byte, 64)
				for x := range sig {
					sig[x] = alphabet[r.IntN(len(alphabet))]
				}
				body := fmt.Sprintf(`{"id":"WH-%d-%x","event_version":"1.0","create_time":"2026-12-01T10:00:00Z",`+
					`"resource_type":"capture","event_type":"PAYMENT.CAPTURE.COMPLETED","summary":"Payment completed for $ 49.90 USD",`+
					`"resource":{"id":"%x","amount":{"currency_code":"USD","value":"49.90"},"final_capture":true,`+
					`"seller_protection":{"status":"ELIGIBLE"},"status":"COMPLETED","invoice_id":"INV-%d",`+
					`"create_time":"2026-12-01T09:59:58Z","update_time":"2026-12-01T09:59:58Z"},"signature":"%s"}`,
					j, r.Uint64(), r.Uint64(), j, sig)
				e := &entry{Record: Record{Key: k, State: StateAnswered, Status: 200, Body: []byte("success"),
					BodyCached: true, Fingerprint: "fp", Copies: 1, FirstSeen: t, LastSeen: t,
					ExpiresAt: t.Add(24 * time.Hour), Changed: t}, keep: t.Add(24 * time.Hour)}
				e.journal(Journal{Notification: &Notification{Method: "POST", URI: "/notify/paypal", Host: "pay.example.com",
					Header: h, Body: []byte(body), BodySize: int64(len(body)), Addr: "10.0.0.5:443", TLS: true}})
				if err := put(tx, e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
}

// dropCache writes path's pages back and drops them from the page cache.
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// cacheFile reads path once, so its pages are in the page cache.
func cacheFile(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}

// rusage is the process's CPU time so far and its major page faults.
func rusage(b *testing.B) (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Majflt
}
