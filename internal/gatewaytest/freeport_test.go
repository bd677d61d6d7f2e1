package gatewaytest

import "testing"

// FreePort never hands the same port twice in a process: the kernel
// does, and two servers of one test (a gateway's site and its admin
// endpoint) then shared one.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed twice (after %d)", p, len(seen))
		}
		seen[p] = true
	}
}
