package queue_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestReviewMarkersOutliveRequests (review): a dispatch marker must be kept at least as long as
// the request it fences, or a request redelivered after its marker expired (a consumer made
// again, a Redis that lost the record: record_lost) passes the gate again and runs twice.
// EnsureStreams sets a raised --retention on an existing jobs stream only: the results stream,
// which holds the markers, keeps the MaxAge it was made with.
func TestReviewMarkersOutliveRequests(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	ctx := t.Context()
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{Retention: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// The operator raises the workers' --retention.
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{Retention: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	age := map[string]time.Duration{}
	for _, name := range []string{s.JobsStream(), s.ResultsStream()} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		age[name] = st.CachedInfo().Config.MaxAge
	}
	if age[s.ResultsStream()] < age[s.JobsStream()] {
		t.Errorf("results stream (markers) MaxAge = %v < jobs stream (requests) MaxAge = %v: a kept request outlives its marker",
			age[s.ResultsStream()], age[s.JobsStream()])
	}
}
