package keying

import (
	"slices"
	"strings"
	"testing"
)

func TestSearchRefs(t *testing.T) {
	long := strings.Repeat("9", 129)
	got := SearchRefs("A1", "", "A1", "B\n2", long, "C3", "D\x004")
	if want := []string{"A1", "C3"}; !slices.Equal(got, want) {
		t.Fatalf("SearchRefs = %q, want %q", got, want)
	}
	if got := SearchRefs("", ""); got != nil {
		t.Fatalf("SearchRefs of nothing = %q, want nil", got)
	}
	many := SearchRefs("1", "2", "3", "4", "5", "6", "7", "8", "9")
	if len(many) != 8 {
		t.Fatalf("kept %d refs, want 8", len(many))
	}
}
