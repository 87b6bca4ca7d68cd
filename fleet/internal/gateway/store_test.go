package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// TestStoreRefusalNotRetried: a refusal decided before anything is published (a tenant's
// max_queued, a bad name, a body the connection cannot carry) or by the stream (full) is
// answered as itself after one try, never retried into 504 "may have been stored".
func TestStoreRefusalNotRetried(t *testing.T) {
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"queue full", &runfleet.JobError{ID: "a", Err: &runfleet.QueueFullError{Tenant: "acme", Queued: 3, MaxQueued: 3}}, runfleet.ErrQueueFull},
		{"stream full", &runfleet.JobError{ID: "a", Err: fmt.Errorf("publish: %w", runfleet.ErrStreamFull)}, runfleet.ErrStreamFull},
		{"invalid tenant", &runfleet.JobError{ID: "a", Err: fmt.Errorf("tenant %q: %w", "A", job.ErrInvalidTenant)}, job.ErrInvalidTenant},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			err := g.store(t.Context(), func(context.Context) error { tries++; return c.err })
			if tries != 1 || !errors.Is(err, c.want) || errors.Is(err, errUnconfirmed) {
				t.Errorf("store() = %v after %d tries, want %v after 1 and not unconfirmed", err, tries, c.want)
			}
		})
	}
}
