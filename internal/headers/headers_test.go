package headers

import (
	"net/http"
	"reflect"
	"testing"
)

func TestCloneWithout(t *testing.T) {
	h := http.Header{"A": {"1", "2"}, "Drop": {"x"}, "Empty": {}, "B": {"3"}}
	got := CloneWithout(h, func(name string) bool { return name == "Drop" })
	want := http.Header{"A": {"1", "2"}, "Empty": nil, "B": {"3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// A copy: appending to one value list leaves the others and h alone.
	got["A"] = append(got["A"], "more")
	if len(got["B"]) != 1 || got["B"][0] != "3" || len(h["A"]) != 2 {
		t.Errorf("values not kept apart: %v, h %v", got, h)
	}
	h["B"][0] = "changed"
	if got["B"][0] != "3" {
		t.Error("the copy shares h's values")
	}
}
