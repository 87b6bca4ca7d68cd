package runner_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestLostConsumersMadeAgain: a tenant's consumer deleted while its jobs wait and run, and then
// the queue's discovery consumer, lose no job. The running worker makes each again from the
// stream's start: the jobs that waited run, those that ran or were running settle once and run
// once, and a tenant that comes after the discovery consumer was lost is served.
func TestLostConsumersMadeAgain(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{concurrency: 2})
	var ids []string
	submit := func(tenant string, n int) {
		for range n {
			ids = append(ids, f.submitAs(tenant, job.Request{Language: "python3", Code: "import time; time.sleep(0.2)"}))
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := f.js.DeleteConsumer(t.Context(), f.subjects.JobsStream(), name); err != nil {
			t.Fatal(err)
		}
	}

	submit("acme", 12)
	f.wait(ids[0]) // the tenant's consumer exists and serves; most of its jobs wait, two run
	remove(f.subjects.TenantConsumer(job.DefaultQueue, "acme"))
	submit("acme", 6)
	f.wait(ids[len(ids)-1])

	remove(f.subjects.Discovery(job.DefaultQueue))
	submit("acme", 4)
	submit("umbrella", 4) // a new tenant: only a discovery consumer makes its consumer

	results, err := f.js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if r := f.wait(id); r.st.Status != job.StatusSucceeded {
			t.Errorf("job %s settled %s %s %s", id, r.st.Status, r.st.Reason, r.st.Detail)
		}
	}
	d := f.dispatches()
	for _, id := range ids {
		if d[id] != 1 {
			t.Errorf("job %s dispatched %d times, want 1", id, d[id])
		}
		info, err := results.Info(t.Context(), jetstream.WithSubjectFilter(f.subjects.Settled("*", id)))
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		if err != nil || n != 1 {
			t.Errorf("job %s: settlements stored = %v (%v), want 1", id, info.State.Subjects, err)
		}
	}
}

// TestConsumerLostWhileNoWorkerRuns: a tenant's consumer lost while no worker runs is made again
// by the next worker from the stream's start, not from its queue's discovery floor, which had
// passed the jobs that waited in it.
func TestConsumerLostWhileNoWorkerRuns(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{concurrency: 1})
	first := f.submitAs("acme", job.Request{Language: "python3", Code: "print('up', flush=True)\nimport time; time.sleep(2)"})
	var waiting []string
	for range 5 {
		waiting = append(waiting, f.submitAs("acme", job.Request{Language: "python3", Code: "pass"}))
	}
	testenv.WaitFor(t, 30*time.Second, "the waiting jobs discovered", func() bool {
		c, err := f.js.Consumer(t.Context(), f.subjects.JobsStream(), f.subjects.Discovery(job.DefaultQueue))
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	f.drain()
	<-f.served
	if st := f.wait(first).st; st.Status != job.StatusSucceeded {
		t.Fatalf("first job settled %s %s", st.Status, st.Detail)
	}
	if err := f.js.DeleteConsumer(t.Context(), f.subjects.JobsStream(), f.subjects.TenantConsumer(job.DefaultQueue, "acme")); err != nil {
		t.Fatal(err)
	}
	f.startWorker(workerOpts{id: "w2"})
	for _, id := range waiting {
		if st := f.wait(id).st; st.Status != job.StatusSucceeded {
			t.Errorf("job %s settled %s %s", id, st.Status, st.Detail)
		}
	}
	d := f.dispatches()
	for _, id := range append(waiting, first) {
		if d[id] != 1 {
			t.Errorf("job %s dispatched %d times, want 1", id, d[id])
		}
	}
}
