package tenant_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestEnsureBucketAtOnceInACluster: processes starting together on different nodes of a cluster
// all open the replicated tenants bucket, whichever of them creates it, within their start
// budget — while the bucket has no leader yet, a lookup gets no answer and must be asked again.
func TestEnsureBucketAtOnceInACluster(t *testing.T) {
	urls := testenv.StartNATSCluster(t, 3)
	s, _ := job.NewSubjects("")
	var conns []jetstream.JetStream
	for _, u := range urls {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, js)
	}
	testenv.WaitFor(t, time.Minute, "the cluster's JetStream API", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := conns[0].AccountInfo(ctx)
		return err == nil
	})
	// As an older fleet made them: one replica each, raised by the workers that start.
	if err := protocol.EnsureStreams(t.Context(), conns[0], s, protocol.StreamOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, js := range conns[:2] {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second) // a worker's start budget
			defer cancel()
			start := time.Now()
			if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{Replicas: 3}); err != nil {
				t.Errorf("node %d: %v after %v", i, err, time.Since(start))
				return
			}
			if _, err := tenant.EnsureBucket(ctx, js, s, 3); err != nil {
				t.Errorf("node %d: %v after %v", i, err, time.Since(start))
			}
		})
	}
	wg.Wait()
}
