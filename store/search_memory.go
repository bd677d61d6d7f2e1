package store

import (
	"context"
	"slices"
	"time"
)

// The memory store files search entries among its ref lists (see
// memoryIndex), under scope "" which no key's scope is, so they are kept
// and swept as those are.
func searchIxKey(ref string) string { return refIxKey("", "search", ref) }

// search files key under refs until keep at least. mu held.
func (ix *memoryIndex) search(key string, keep time.Time, refs []string) {
	if len(refs) == 0 {
		return
	}
	if ix.days == nil { // file makes both at once
		ix.days, ix.refs = map[string]*keptList{}, map[string]*keptList{}
	}
	for _, ref := range refs {
		add(ix.refs, searchIxKey(ref), key, keep, true)
	}
}

func (s *Memory) KeysByRef(ctx context.Context, ref string) ([]string, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	keys := live(s.ix.refs, searchIxKey(ref), t)
	return slices.Clone(keys[max(len(keys)-MaxSearch, 0):]), nil
}

var _ Searcher = (*Memory)(nil)
