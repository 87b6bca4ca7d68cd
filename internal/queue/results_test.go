package queue_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/queue"
	"github.com/runfleet/runfleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newResults(t *testing.T) *queue.Results {
	t.Helper()
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := runfleet.EnsureStreams(t.Context(), js, s, runfleet.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return queue.NewResults(js, s)
}

// TestChainFencing: whoever writes to a job's results first wins; a chain that meets another
// writer's message is refused from then on, and a job settles once.
func TestChainFencing(t *testing.T) {
	ctx := t.Context()
	cases := []struct {
		name string
		run  func(t *testing.T, r *queue.Results)
	}{
		{"pages then settlement", func(t *testing.T, r *queue.Results) {
			c := r.Chain("j", 1, "")
			for i := range int64(3) {
				if err := c.Page(ctx, job.Stdout, i, i*2, []byte("ab")); err != nil {
					t.Fatalf("Page(%d) error = %v", i, err)
				}
			}
			if err := c.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusSucceeded, Attempt: 1}); err != nil {
				t.Fatalf("Settle() error = %v", err)
			}
			if st, err := r.Settlement(ctx, "j"); err != nil || st.Status != job.StatusSucceeded {
				t.Errorf("Settlement() = %+v, %v", st, err)
			}
		}},
		{"takeover settlement cuts off the old chain", func(t *testing.T, r *queue.Results) {
			old := r.Chain("j", 1, "")
			if err := old.Page(ctx, job.Stdout, 0, 0, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := r.SettleOnce(ctx, job.Settlement{JobID: "j", Status: job.StatusUnknown, Attempt: 2}, ""); err != nil {
				t.Fatalf("SettleOnce() error = %v", err)
			}
			if err := old.Page(ctx, job.Stdout, 1, 1, []byte("y")); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("old Page() after takeover error = %v, want ErrConflict", err)
			}
			if err := old.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusSucceeded, Attempt: 1}); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("old Settle() after takeover error = %v, want ErrConflict", err)
			}
		}},
		{"settles once", func(t *testing.T, r *queue.Results) {
			st := job.Settlement{JobID: "j", Status: job.StatusRejected}
			if err := r.SettleOnce(ctx, st, ""); err != nil {
				t.Fatal(err)
			}
			if err := r.SettleOnce(ctx, st, ""); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("second SettleOnce() error = %v, want ErrConflict", err)
			}
			if err := r.Chain("j", 3, "").Page(ctx, job.Stdout, 0, 0, []byte("late")); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("a new chain's first page after the settlement error = %v, want ErrConflict", err)
			}
		}},
		{"two chains race", func(t *testing.T, r *queue.Results) {
			a, b := r.Chain("j", 1, ""), r.Chain("j", 2, "")
			if err := a.Page(ctx, job.Stdout, 0, 0, []byte("a")); err != nil {
				t.Fatal(err)
			}
			if err := b.Page(ctx, job.Stdout, 0, 0, []byte("b")); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("second chain's page error = %v, want ErrConflict", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newResults(t)) })
	}
}
