package runner_test

import (
	"errors"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/job"
)

// TestRecordLostBetweenClaims: a job's record lost between two claims of the same message
// (Redis restarted empty, or the key removed) does not give the new attempt the stale one's
// generation, so the stale attempt's settlement is never taken for the new one's: the new
// attempt's settlement meets a conflict, and every write names its own attempt.
func TestRecordLostBetweenClaims(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(f *fleet, id string) error
	}{
		{"FLUSHDB", func(f *fleet, _ string) error { return f.redis.Client().FlushDB(f.t.Context()).Err() }},
		{"DEL", func(f *fleet, id string) error {
			return f.redis.Client().Del(f.t.Context(), keyspace.New("runfleet").Record("default", id), keyspace.New("runfleet").Lease("default", id)).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			ctx := t.Context()
			leases := lease.NewStore(f.redis.Client(), lease.Options{})
			if err := leases.Init(ctx); err != nil {
				t.Fatal(err)
			}
			const id = "lost-record"
			queued := time.Now()
			stale, err := leases.Claim(ctx, "default", id, "w1", lease.Delivery{Count: 1, QueuedAt: queued})
			if err != nil || stale.Lease == nil {
				t.Fatalf("first claim = %+v, %v", stale, err)
			}
			if err := tc.lose(f, id); err != nil {
				t.Fatal(err)
			}
			// The stale attempt runs on; the message is delivered again, to another worker.
			fresh, err := leases.Claim(ctx, "default", id, "w2", lease.Delivery{Count: 2, QueuedAt: queued})
			if err != nil || fresh.Lease == nil {
				t.Fatalf("claim after the record was lost = %+v, %v", fresh, err)
			}
			sg, fg := stale.Lease.Generation(), fresh.Lease.Generation()
			if fg == sg {
				t.Errorf("generation after the record was lost = %d, the stale attempt's too", fg)
			}
			results := queue.NewResults(f.js, f.subjects)
			chain, stored, err := results.Resume(ctx, "default", id, fg, "")
			if err != nil || stored.Settled {
				t.Fatalf("Resume() = %+v, %v", stored, err)
			}
			if err := results.Chain("default", id, sg, "").Settle(ctx, job.Settlement{JobID: id, Status: job.StatusSucceeded, Attempt: sg}); err != nil {
				t.Fatalf("stale settlement: %v", err)
			}
			err = chain.Settle(ctx, job.Settlement{JobID: id, Status: job.StatusUnknown, Reason: job.ReasonRecordLost, Attempt: fg})
			if !errors.Is(err, queue.ErrConflict) {
				t.Errorf("the new attempt's Settle() after the stale one settled = %v, want ErrConflict", err)
			}
			st, err := results.Settlement(ctx, "default", id)
			if err != nil || st.Attempt != sg || st.Status != job.StatusSucceeded {
				t.Errorf("stored settlement = attempt %d %s (%v), want the stale attempt's %d succeeded", st.Attempt, st.Status, err, sg)
			}
		})
	}
}
