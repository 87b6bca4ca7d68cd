package fairshare_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestRunningBound: two workers share a tenant's max_running through Redis; a slot given back is
// free at once, and a dead worker's slots come back when they expire, its renewals gone.
func TestRunningBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return testenv.StartRedis(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testenv.StartCluster(t, 3, 5*time.Second).Client() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			rdb := tc.rdb(t)
			const ttl = 2 * time.Second
			w1 := fairshare.NewRunning(rdb, "runfleet", "w1", ttl)
			w2 := fairshare.NewRunning(rdb, "runfleet", "w2", ttl)
			got1, err := w1.Acquire(ctx, "acme", 2, 3)
			if err != nil || len(got1) != 2 {
				t.Fatalf("w1 Acquire(2 of 3) = %v, %v; want 2 tokens", got1, err)
			}
			got2, err := w2.Acquire(ctx, "acme", 2, 3)
			if err != nil || len(got2) != 1 {
				t.Fatalf("w2 Acquire(2 of 3) = %v, %v; want the 1 left", got2, err)
			}
			if got, err := w2.Acquire(ctx, "other", 1, 1); err != nil || len(got) != 1 {
				t.Errorf("another tenant's Acquire = %v, %v; want its own slot", got, err)
			}
			if got, _ := w2.Acquire(ctx, "acme", 1, 3); len(got) != 0 {
				t.Fatalf("Acquire past the bound = %v, want none", got)
			}
			if err := w1.Release(ctx, "acme", got1[0]); err != nil {
				t.Fatal(err)
			}
			if got, _ := w2.Acquire(ctx, "acme", 1, 3); len(got) != 1 {
				t.Fatalf("Acquire after a release = %v, want the freed slot", got)
			}
			// w2 keeps renewing its two; w1 dies holding one, which expires.
			keepCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); w2.Keep(keepCtx, slog.Default()) }()
			defer func() { stop(); <-done }()
			testenv.WaitFor(t, 10*time.Second, "the dead worker's slot to expire", func() bool {
				got, err := w2.Acquire(ctx, "acme", 1, 3)
				return err == nil && len(got) == 1
			})
			if n, err := w2.Count(ctx, "acme"); err != nil || n != 3 {
				t.Errorf("Count() = %d, %v; want 3, all w2's, renewed past the TTL", n, err)
			}
		})
	}
}
