// Package testenv keeps the developers' fast loop fast: `go test -short
// ./...` leaves out the tests that start processes (the built idemgate, a
// child test process, Sentinel, Cluster or replica redis-servers), inject
// faults (Redis killed, paused, restarted or out of memory; a backend or a
// platform that hangs up), drive Chromium, or run for seconds (load, sweeps
// at rate, timers waited out). The README's test command and CI set no
// -short: they run every test.
package testenv

import (
	"flag"
	"strconv"
	"testing"
)

// Slow skips t under go test -short; why says in a few words what makes
// the test slow ("runs the built idemgate binary", "fault: Redis paused").
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("not under -short: " + why)
	}
}

// ParallelUnderShort lets n parallel tests run at once under go test
// -short when the command line sets no -parallel: for a package whose
// parallel tests mostly wait out timers (TTLs), go test's default
// (GOMAXPROCS, 2 on a 2-core machine) would run them nearly one after
// another; a machine with n cores runs them so anyway. Call it from
// TestMain before m.Run. The full run keeps go test's default.
func ParallelUnderShort(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if set || f == nil {
		return
	}
	if cur, err := strconv.Atoi(f.Value.String()); err == nil && cur < n {
		f.Value.Set(strconv.Itoa(n))
	}
}
