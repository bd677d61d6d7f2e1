// Package testenv keeps the developers' fast loop fast: `go test -short
// ./...` leaves out the tests that start processes (the built idemgate, a
// child test process, Sentinel, Cluster or replica redis-servers), inject
// faults (Redis killed, paused, restarted or out of memory; a backend or a
// platform that hangs up), drive Chromium, or run for seconds (load, sweeps
// at rate, timers waited out). The README's test command and CI set no
// -short: they run every test.
package testenv

import "testing"

// Slow skips t under go test -short; why says in a few words what makes
// the test slow ("runs the built idemgate binary", "fault: Redis paused").
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("not under -short: " + why)
	}
}
