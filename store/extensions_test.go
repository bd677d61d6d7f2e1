package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// extensions are the features beside the claim contract, each with what a
// store lacking it keeps not. Every store of this package implements every
// one (their interface guards say so at compile time); the extensions
// suite says so for each store the contract tests run.
var extensions = []struct {
	what string
	typ  reflect.Type
}{
	{"listings", reflect.TypeFor[Lister]()},
	{"recovery", reflect.TypeFor[Recovery]()},
	{"order state", reflect.TypeFor[OrderBook]()},
	{"order index", reflect.TypeFor[OrderIndex]()},
	{"search index", reflect.TypeFor[Searcher]()},
	{"refused list", reflect.TypeFor[RefusedLog]()},
	{"delivery queue", reflect.TypeFor[Queuer]()},
	{"leases", reflect.TypeFor[Leaser]()},
	{"missing list", reflect.TypeFor[MissingLog]()},
}

func init() {
	suites = append(suites, newSuite("extensions", "claim contract", []storeCase[Store]{
		{"every_extension", func(t *testing.T, s Store) {
			for _, x := range extensions {
				if !reflect.TypeOf(s).Implements(x.typ) {
					t.Errorf("%T keeps no %s: it does not implement %s", s, x.what, x.typ)
				}
			}
			if _, err := As[Lister](s, "listings"); err != nil {
				t.Errorf("As[Lister]: %v", err)
			}
		}},
	}))
}

// TestAsNamesWhatIsMissing: a store that implements the claim contract
// alone (here a real memory store behind a wrapper that hides the rest)
// is refused an extension with ErrNoExtension and words that name it.
func TestAsNamesWhatIsMissing(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	var bare Store = struct{ Store }{m}
	_, err := As[OrderBook](bare, "order state")
	if !errors.Is(err, ErrNoExtension) || !strings.Contains(err.Error(), "keeps no order state") {
		t.Fatalf("As on a bare store: %v", err)
	}
	if _, ok := bare.(Lister); ok {
		t.Fatal("the wrapper should hide the extensions")
	}
	ob, err := As[OrderBook](Store(m), "order state")
	if err != nil || ob == nil {
		t.Fatalf("As on the memory store: %v, %v", ob, err)
	}
}
