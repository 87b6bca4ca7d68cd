package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
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
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{}); err != nil {
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
			c := r.Chain("default", "j", 1, "")
			for i := range int64(3) {
				if err := c.Page(ctx, job.Stdout, i, i*2, []byte("ab")); err != nil {
					t.Fatalf("Page(%d) error = %v", i, err)
				}
			}
			if err := c.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusSucceeded, Attempt: 1}); err != nil {
				t.Fatalf("Settle() error = %v", err)
			}
			if st, err := r.Settlement(ctx, "default", "j"); err != nil || st.Status != job.StatusSucceeded {
				t.Errorf("Settlement() = %+v, %v", st, err)
			}
		}},
		{"takeover settlement cuts off the old chain", func(t *testing.T, r *queue.Results) {
			old := r.Chain("default", "j", 1, "")
			if err := old.Page(ctx, job.Stdout, 0, 0, []byte("x")); err != nil {
				t.Fatal(err)
			}
			cur, stored, err := r.Resume(ctx, "default", "j", 2, "")
			if err != nil {
				t.Fatalf("Resume() error = %v", err)
			}
			if err := cur.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusUnknown, Attempt: 2, Pages: stored.Pages}); err != nil {
				t.Fatalf("Settle() after Resume error = %v", err)
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
			first, _, err := r.Resume(ctx, "default", "j", 1, "")
			if err != nil {
				t.Fatal(err)
			}
			second, _, err := r.Resume(ctx, "default", "j", 2, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Settle(ctx, st); err != nil {
				t.Fatal(err)
			}
			if err := second.Settle(ctx, st); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("second Settle() error = %v, want ErrConflict", err)
			}
			if _, stored, err := r.Resume(ctx, "default", "j", 3, ""); err != nil || !stored.Settled {
				t.Errorf("Resume() after the settlement = %+v, %v; want Settled", stored, err)
			}
			if err := r.Chain("default", "j", 3, "").Page(ctx, job.Stdout, 0, 0, []byte("late")); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("a new chain's first page after the settlement error = %v, want ErrConflict", err)
			}
		}},
		{"takeover counts what the earlier attempt stored", func(t *testing.T, r *queue.Results) {
			old := r.Chain("default", "j", 1, "")
			pages := []struct {
				stream string
				data   string
			}{{job.Stdout, "abc"}, {job.Stderr, "e"}, {job.Stdout, "de"}}
			offsets := map[string]int64{}
			for i, p := range pages {
				if err := old.Page(ctx, p.stream, int64(i), offsets[p.stream], []byte(p.data)); err != nil {
					t.Fatal(err)
				}
				offsets[p.stream] += int64(len(p.data))
			}
			// Another job's output in between must not count.
			if err := r.Chain("default", "other", 1, "").Page(ctx, job.Stdout, 0, 0, []byte("zzzz")); err != nil {
				t.Fatal(err)
			}
			_, stored, err := r.Resume(ctx, "default", "j", 2, "")
			if err != nil {
				t.Fatal(err)
			}
			if want := (queue.Stored{Pages: 3, StdoutBytes: 5, StderrBytes: 1}); stored != want {
				t.Errorf("Resume() stored = %+v, want %+v", stored, want)
			}
		}},
		{"a stale write after Resume fences the takeover", func(t *testing.T, r *queue.Results) {
			old := r.Chain("default", "j", 1, "")
			if err := old.Page(ctx, job.Stdout, 0, 0, []byte("a")); err != nil {
				t.Fatal(err)
			}
			cur, _, err := r.Resume(ctx, "default", "j", 2, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Page(ctx, job.Stdout, 1, 1, []byte("b")); err != nil {
				t.Fatal(err)
			}
			if err := cur.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusUnknown, Pages: 1}); !errors.Is(err, queue.ErrConflict) {
				t.Errorf("Settle() counting 1 page while 2 are stored: error = %v, want ErrConflict", err)
			}
		}},
		{"a huge detail is clipped, never refused", func(t *testing.T, r *queue.Results) {
			c, _, err := r.Resume(ctx, "default", "j", 1, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusError, Detail: strings.Repeat("x", 2<<20)}); err != nil {
				t.Fatalf("Settle() with a 2 MiB detail error = %v", err)
			}
			if st, err := r.Settlement(ctx, "default", "j"); err != nil || len(st.Detail) > job.MaxDetailBytes {
				t.Errorf("stored detail = %d bytes (%v), want at most %d", len(st.Detail), err, job.MaxDetailBytes)
			}
		}},
		{"two chains race", func(t *testing.T, r *queue.Results) {
			a, b := r.Chain("default", "j", 1, ""), r.Chain("default", "j", 2, "")
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

func TestConsumerRaisesAnOlderAckWait(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		ackWait, want time.Duration
	}{
		{30 * time.Second, 30 * time.Second},
		{90 * time.Second, 90 * time.Second}, // a worker with a longer lease raises it
		{30 * time.Second, 90 * time.Second}, // and one with a shorter lease never lowers it
	} {
		c, err := queue.TenantConsumer(t.Context(), js, s, queue.Pair{Queue: "default", Tenant: "default"}, 0, time.Time{}, queue.ConsumerOptions{AckWait: step.ackWait})
		if err != nil {
			t.Fatalf("Consumer(AckWait %v) error = %v", step.ackWait, err)
		}
		info, err := c.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.AckWait != step.want {
			t.Errorf("after Consumer(AckWait %v): AckWait = %v, want %v", step.ackWait, info.Config.AckWait, step.want)
		}
	}
}

// TestPageTTL: pages carry the results stream's page TTL, so they expire before the settlement,
// which has none and lives for the stream's MaxAge (the job's record).
func TestPageTTL(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{ResultsMaxAge: 90 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c := queue.NewResults(js, s).Chain("default", "j", 1, "")
	if err := c.Page(ctx, job.Stdout, 0, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, job.Settlement{JobID: "j", Status: job.StatusSucceeded, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]string{s.Page("default", "j"): "1h30m0s", s.Settled("default", "j"): ""} {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(jetstream.MsgTTLHeader); got != want {
			t.Errorf("%s: Nats-TTL = %q, want %q", subject, got, want)
		}
	}
}
