package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func retryResults(t *testing.T) (*testenv.NATS, *Results) {
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
	return srv, NewResults(js, s)
}

// TestRetryOfStoredWrite: a write whose ack was lost is tried again with the same Nats-Msg-Id; the
// stream answers duplicate with the first try's sequence instead of refusing it on the fence, and
// the chain goes on from there.
func TestRetryOfStoredWrite(t *testing.T) {
	ctx := t.Context()
	_, r := retryResults(t)
	for _, tc := range []struct {
		name  string
		write func(c *Chain) error
	}{
		{"page", func(c *Chain) error { return c.Page(ctx, job.Stdout, 0, 0, []byte("a")) }},
		{"settlement", func(c *Chain) error { return c.Settle(ctx, job.Settlement{JobID: c.id, Status: job.StatusSucceeded}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := r.Chain("default", "retry-"+tc.name, 1, "")
			if err := tc.write(c); err != nil {
				t.Fatal(err)
			}
			first := c.last
			c.last = 0 // as if the ack had been lost: the retry expects what the first try expected
			if err := tc.write(c); err != nil {
				t.Fatalf("retry of a stored write: %v, want a duplicate ack", err)
			}
			if c.last != first {
				t.Errorf("chain at sequence %d after the retry, want the first try's %d", c.last, first)
			}
			other := r.Chain("default", c.id, 2, "")
			if err := other.Page(ctx, job.Stdout, 0, 0, []byte("b")); err == nil {
				t.Errorf("another attempt wrote past the stored %s", tc.name)
			}
		})
	}
}

// TestRetryAcrossOutage: a write made while the server is down is stored once it is back.
func TestRetryAcrossOutage(t *testing.T) {
	srv, r := retryResults(t)
	c := r.Chain("default", "outage", 1, "")
	if err := c.Page(t.Context(), job.Stdout, 0, 0, []byte("before")); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Page(ctx, job.Stdout, 1, 6, []byte("during")) }()
	srv.Restart()
	if err := <-done; err != nil {
		t.Fatalf("page written across the outage: %v", err)
	}
	st, err := r.js.Stream(t.Context(), r.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(r.subjects.Page("default", "outage")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[r.subjects.Page("default", "outage")]; n != 2 {
		t.Errorf("%d pages stored, want 2", n)
	}
}
