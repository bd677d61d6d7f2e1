package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A clean Close leaves the freelist written, so the next open reads it
// instead of walking every page of the file; the first commit after the
// open drops it again, so a crash from then on leaves the walk to the next
// open, which rebuilds a freelist bbolt's own check agrees with.
func TestEmbeddedCloseWritesFreelist(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "e.db")
	s, err := NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 3000) // past a page: overflow pages to free
	for i := range 200 {
		key := "k" + strconv.Itoa(i)
		r, err := s.Claim(ctx, key, "", time.Minute)
		if err != nil || r.Outcome != Won {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
		if err := s.Complete(ctx, key, r.Token, Answer{Status: 200, Body: body, BodyCached: true}, time.Hour, Journal{}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !syncedFreelist(t, path) {
		t.Fatal("Close left the file without a freelist: the next open walks every page")
	}

	check := func(s *Embedded, deleted Outcome) {
		t.Helper()
		err := s.db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("bbolt check: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			key := "k" + strconv.Itoa(i)
			r, err := s.Claim(ctx, key, "", time.Minute)
			want := Answered
			if i%2 == 0 {
				want = deleted
			}
			if err != nil || r.Outcome != want {
				t.Fatalf("%s: %+v %v, want outcome %v", key, r, err, want)
			}
		}
	}
	s, err = NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check(s, Won) // a deleted key is claimed again: a write
	s.crash()
	if syncedFreelist(t, path) {
		t.Fatal("a commit after the open kept the freelist written: commits pay for writing it")
	}
	s, err = NewEmbedded(path, EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, InFlight)
}

// crash stops the store as a killed process would: its goroutines end
// and the file is closed with nothing more written.
func (s *Embedded) crash() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		close(s.closed)
		<-s.committed
		_ = s.db.Close()
		s.n.wakeAll()
	})
}

// syncedFreelist reports whether the file's last commit wrote the freelist.
func syncedFreelist(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return !lacksFreelist(f)
}
