package queue_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestPassGate: the first attempt to store a job's marker holds the gate; its own retry passes,
// any other attempt (another generation, or the same generation of another worker) is refused,
// and a watch of the job never sees the marker.
func TestPassGate(t *testing.T) {
	f := newConsumerFixture(t)
	r := queue.NewResults(f.js, f.s)
	ctx := t.Context()
	if err := r.PassGate(ctx, "default", "j", 1, "w1"); err != nil {
		t.Fatalf("first PassGate() = %v", err)
	}
	if err := r.PassGate(ctx, "default", "j", 1, "w1"); err != nil {
		t.Errorf("the same attempt's retry: PassGate() = %v, want nil", err)
	}
	for _, other := range []struct {
		attempt int64
		worker  string
	}{{2, "w2"}, {1, "w2"}, {2, "w1"}} {
		err := r.PassGate(ctx, "default", "j", other.attempt, other.worker)
		var passed *queue.GatePassedError
		if !errors.As(err, &passed) || passed.Attempt != 1 {
			t.Errorf("attempt %d of %s: PassGate() = %v, want attempt 1 passed", other.attempt, other.worker, err)
		}
	}
	if err := r.PassGate(ctx, "default", "k", 7, "w2"); err != nil {
		t.Errorf("another job: PassGate() = %v", err)
	}
	st, err := f.js.Stream(ctx, f.s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, f.s.Results("default", "j")); err == nil {
		t.Error("the marker is among the job's results, which watches read")
	}
}

// BenchmarkPassGate is the dispatch gate's cost on a job's path, beside the settlement's store
// (a fenced publish of about the same size) in the same run:
// go test -run '^$' -bench PassGate -count 5 ./fleet/internal/queue/
func BenchmarkPassGate(b *testing.B) {
	f := newConsumerFixture(b)
	r := queue.NewResults(f.js, f.s)
	b.Run("gate", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if err := r.PassGate(b.Context(), "default", "g"+strconv.Itoa(i), 1, "w"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("settle", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			id := "s" + strconv.Itoa(i)
			if err := r.Chain("default", id, 1, "").Settle(b.Context(), job.Settlement{JobID: id, Status: job.StatusSucceeded, Attempt: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEnsureStreamsAddsMarkers: a results stream an earlier version made, without the markers'
// subject, gets it from EnsureStreams, keeping its own; the gate then works on it.
func TestEnsureStreamsAddsMarkers(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	ctx := t.Context()
	for _, cfg := range protocol.StreamConfigs(s, protocol.StreamOptions{}) {
		if cfg.Name == s.ResultsStream() {
			cfg.Subjects = slices.DeleteFunc(cfg.Subjects, func(sub string) bool { return sub == s.AllDispatched() })
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// No stream takes the subject: the publish finds no responders, which it retries (a leader
	// election looks the same) until its context ends.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := queue.NewResults(js, s).PassGate(short, "default", "j", 1, "w"); err == nil {
		t.Fatal("PassGate() on a stream without the markers' subject = nil, want an error")
	}
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().Config.Subjects, []string{s.AllResults(), s.Rejected(), s.AllDispatched()}; !slices.Equal(got, want) {
		t.Errorf("results stream subjects = %v, want %v", got, want)
	}
	if err := queue.NewResults(js, s).PassGate(ctx, "default", "j", 1, "w"); err != nil {
		t.Errorf("PassGate() after EnsureStreams = %v", err)
	}
}
