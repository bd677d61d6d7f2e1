package billcheck

import (
	"bufio"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MillionRows parses a bill of 1M rows per case, produced on
// the fly by an io.Reader (no file, no bill held in memory: a generated
// block of rows replayed, so that the generator's cost stays out), and
// reports ns/row (wall), cpu-ns/row (the process's user+system time, the
// steadier figure on a shared machine), allocations per row and the
// heap's peak while parsing: the parser's memory must not grow with the
// rows. Run one layout per process
// for a meaningful VmHWM (the process's peak RSS): each platform's
// BenchmarkBillMillionRows runs its own, e.g.
//
//	go test -run '^$' -bench 'BillMillionRows' -benchtime 1x ./platforms/alipay
func MillionRows(b *testing.B, cases []Case) {
	for _, c := range cases {
		b.Run(c.Name, func(b *testing.B) {
			const n = 1_000_000
			src := newReplay(c.Gen, n) // holds the block: ~3 MiB of the peak heap
			var before, after runtime.MemStats
			var peak uint64
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				src.rewind()
				r, err := c.Format.Open(src)
				if err != nil {
					b.Fatal(err)
				}
				for rows := 0; ; rows++ {
					_, err := r.Next()
					if err == io.EOF {
						if rows != n || (c.Checked && !r.Summary().Checked) {
							b.Fatalf("%d rows, summary %+v", rows, r.Summary())
						}
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if rows%100_000 == 0 {
						b.StopTimer()
						var m runtime.MemStats
						runtime.ReadMemStats(&m)
						peak = max(peak, m.HeapInuse)
						b.StartTimer()
					}
				}
			}
			b.StopTimer()
			cpu = cpuTime() - cpu
			runtime.ReadMemStats(&after)
			rows := float64(b.N) * n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rows, "ns/row")
			b.ReportMetric(float64(cpu.Nanoseconds())/rows, "cpu-ns/row")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/rows, "allocs/row")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/rows, "B/row")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			if hwm := vmHWM(); hwm > 0 {
				b.ReportMetric(hwm, "VmHWM-MiB")
			}
		})
	}
}

// Generate measures the generators that the generated tests and the fuzz
// seeds use, streaming a fresh 1M-row bill each.
func Generate(b *testing.B, cases []Case) {
	for _, c := range cases {
		b.Run(c.Name, func(b *testing.B) {
			const n = 1_000_000
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < b.N; i++ {
				if _, err := io.Copy(io.Discard, Stream(c.Gen(), n)); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			rows := float64(b.N) * n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rows, "ns/row")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/rows, "allocs/row")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/rows, "B/row")
		})
	}
}

// replay is head, a block of generated rows repeated, tail: n rows in
// all, with the tail a generator writes after those same n rows.
type replay struct {
	head, block, tail []byte
	reps              int
	part, off, rep    int
}

const replayBlock = 10_000

func newReplay(g func() Generator, n int) *replay {
	gen := g()
	r := &replay{head: gen.Head(nil), reps: n / replayBlock}
	for i := 0; i < replayBlock; i++ {
		r.block = gen.Row(r.block, i)
	}
	var scratch []byte
	for k := 1; k < r.reps; k++ {
		for i := 0; i < replayBlock; i++ {
			scratch = gen.Row(scratch[:0], i)
		}
	}
	r.tail = gen.Tail(nil, n)
	return r
}

func (r *replay) rewind() { r.part, r.off, r.rep = 0, 0, 0 }

func (r *replay) Read(p []byte) (int, error) {
	for {
		var cur []byte
		switch r.part {
		case 0:
			cur = r.head
		case 1:
			cur = r.block
		case 2:
			cur = r.tail
		default:
			return 0, io.EOF
		}
		if r.off < len(cur) {
			n := copy(p, cur[r.off:])
			r.off += n
			return n, nil
		}
		r.off = 0
		if r.part == 1 {
			if r.rep++; r.rep < r.reps {
				continue
			}
		}
		r.part++
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// vmHWM is the process's peak resident set in MiB, from /proc (Linux).
func vmHWM() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err == nil {
				return float64(kb) / 1024
			}
		}
	}
	return 0
}
