package caddymodule

import (
	"context"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// metrics records the handler's counters and histograms. Labels are
// bounded: platform, outcome and operation — never a key or an address.
type metrics struct{}

func loadMetrics(caddy.Context) *metrics { return &metrics{} }

func (m *metrics) request(ctx context.Context, platform, outcome string, d time.Duration) {}

func (m *metrics) backendDuration(ctx context.Context, platform string, d time.Duration) {}

func (m *metrics) waitDuration(ctx context.Context, platform string, d time.Duration) {}

func (m *metrics) copies(ctx context.Context, platform string, n int64) {}

func (m *metrics) lostClaim(ctx context.Context, platform, op string) {}

func (m *metrics) storeError(ctx context.Context, platform, op string) {}
