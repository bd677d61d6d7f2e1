package store

import (
	"os"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
)

// TestMain: the contract's cases run in parallel and mostly wait out
// TTLs, so the fast loop runs 8 at once on any machine.
func TestMain(m *testing.M) {
	testenv.ParallelUnderShort(8)
	os.Exit(m.Run())
}
