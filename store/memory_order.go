package store

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/keying"
)

// memoryIndex is the memory store's reconciliation indexes (see
// OrderIndex): day lists and ref lists, each kept until its keep.
type memoryIndex struct {
	days map[string]*keptList // "<scope>\x00<merchant>\x00<yyyymmdd>" → order ids
	refs map[string]*keptList // "<scope>\x00<settles>\x00<ref>" → event keys
}

type keptList struct {
	items []string
	keep  time.Time
}

func dayIxKey(scope, merchant, day string) string { return scope + "\x00" + merchant + "\x00" + day }

func refIxKey(scope string, settles keying.Settlement, ref string) string {
	return scope + "\x00" + string(settles) + "\x00" + ref
}

// add appends item to the list named k in m, keeping it until keep at
// least; once only when once (a ref's few events), else as the other
// stores' day lists do (an entry per event filed).
func add(m map[string]*keptList, k, item string, keep time.Time, once bool) {
	l := m[k]
	if l == nil {
		l = &keptList{}
		m[k] = l
	}
	if !once || !slices.Contains(l.items, item) {
		l.items = append(l.items, item)
	}
	if keep.After(l.keep) {
		l.keep = keep
	}
}

// file files key's event, run at t, in the indexes. mu held.
func (ix *memoryIndex) file(key string, t time.Time, r *OrderRun) {
	scope, merchant, id, ok := filedAs(key, r)
	if !ok {
		return
	}
	if ix.days == nil {
		ix.days, ix.refs = map[string]*keptList{}, map[string]*keptList{}
	}
	keep := t.Add(r.TTL)
	add(ix.days, dayIxKey(scope, merchant, filedDay(t, r)), id, keep, false)
	for _, ref := range r.Refs {
		add(ix.refs, refIxKey(scope, r.Settles, ref), key, keep, true)
	}
}

// sweep drops lists past their keep. mu held.
func (ix *memoryIndex) sweep(t time.Time) {
	for _, m := range []map[string]*keptList{ix.days, ix.refs} {
		n := 0
		for k, l := range m {
			if !t.Before(l.keep) {
				delete(m, k)
			}
			if n++; n >= sweepBatch {
				break
			}
		}
	}
}

// live returns the list named k in m, unless it is past its keep.
func live(m map[string]*keptList, k string, t time.Time) []string {
	if l := m[k]; l != nil && t.Before(l.keep) {
		return l.items
	}
	return nil
}

func (s *Memory) Orders(ctx context.Context, names []string) ([]*Order, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]*Order, len(names))
	for i, n := range names {
		o := s.orders[n]
		if o == nil || !t.Before(o.keep) || len(o.events) == 0 {
			continue
		}
		v, err := o.view(n)
		if err != nil {
			return nil, err
		}
		v.ExpiresAt = time.Time{}
		out[i] = v
	}
	return out, nil
}

func (s *Memory) EventsByRef(ctx context.Context, scope string, settles keying.Settlement, refs []string) ([][]string, error) {
	t, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([][]string, len(refs))
	for i, ref := range refs {
		out[i] = slices.Clone(live(s.ix.refs, refIxKey(scope, settles, ref), t))
	}
	return out, nil
}

func (s *Memory) RanOn(ctx context.Context, q RanQuery) (RanPage, error) {
	if err := ctx.Err(); err != nil {
		return RanPage{}, err
	}
	start := 0
	if q.Cursor != "" {
		n, err := strconv.Atoi(q.Cursor)
		if err != nil || n < 0 {
			return RanPage{}, ErrBadQuery
		}
		start = n
	}
	t, err := s.enter(ctx)
	if err != nil {
		return RanPage{}, err
	}
	defer s.mu.Unlock()
	ids := live(s.ix.days, dayIxKey(q.Scope, q.Merchant, dayName(q.Day)), t)
	page := RanPage{Orders: []string{}}
	end := min(start+q.limit(), len(ids))
	for i := start; i < end; i++ {
		page.Orders = append(page.Orders, OrderName(q.Scope, q.Merchant, ids[i]))
	}
	if end < len(ids) {
		page.Next = strconv.Itoa(end)
	}
	return page, nil
}
