package store

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// BenchmarkStore measures the two hot paths of every store: a first copy
// (claim + complete: two round trips on Redis) and a replay (one claim on an
// answered key: one round trip).
func BenchmarkStore(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) Store
	}{
		{"memory", func(*testing.B) Store { return NewMemory() }},
		{"embedded", func(b *testing.B) Store {
			s, err := NewEmbedded(filepath.Join(b.TempDir(), "idem.db"), EmbeddedOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"embedded_nosync", func(b *testing.B) Store {
			s, err := NewEmbedded(filepath.Join(b.TempDir(), "idem.db"), EmbeddedOptions{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"redis", func(b *testing.B) Store { return NewRedis(redistest.Start(b).Client(), RedisOptions{}) }},
	}
	ctx := context.Background()
	a := Answer{Status: 200, Header: answer.Header, Body: []byte("success"), BodyCached: true}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.new(b)
			defer s.Close()
			b.Run("claim_complete", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					key := "bench:first:" + strconv.Itoa(i)
					i++
					r, err := s.Claim(ctx, key, "fp", 30*time.Second)
					if err != nil || r.Outcome != Won {
						b.Fatalf("%+v %v", r, err)
					}
					if err := s.Complete(ctx, key, r.Token, a, time.Hour, Journal{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("replay", func(b *testing.B) {
				r, err := s.Claim(ctx, "bench:replay", "fp", 30*time.Second)
				if err == nil {
					err = s.Complete(ctx, "bench:replay", r.Token, a, time.Hour, Journal{})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					r, err := s.Claim(ctx, "bench:replay", "fp", 30*time.Second)
					if err != nil || r.Outcome != Answered {
						b.Fatalf("%+v %v", r, err)
					}
				}
			})
		})
	}
}
