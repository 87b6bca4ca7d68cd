package runner_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestKeptRequestsNeverRunAgain: the jobs stream keeps every request it served. Losing the queue's
// consumers (its discovery consumer and its tenant's) and every Redis record (a FLUSHALL: the epoch
// goes too) and starting the fleet again delivers them all again from the start; none may run
// again, and none may settle again.
func TestKeptRequestsNeverRunAgain(t *testing.T) {
	f := newFleet(t)
	w := f.startWorker(workerOpts{})
	var ids []string
	for i := range 4 {
		r := f.run(job.Request{Language: "python3", Code: "print(" + string(rune('0'+i)) + ")"})
		if r.st.Status != job.StatusSucceeded {
			t.Fatalf("job %s settled %s", r.st.JobID, r.st.Status)
		}
		ids = append(ids, r.st.JobID)
	}
	f.shutdown()
	testenv.WaitFor(t, 30*time.Second, "the first worker stopped consuming", func() bool { return !w.Consuming() })

	for _, name := range []string{f.subjects.Discovery(job.DefaultQueue), f.subjects.TenantConsumer(job.DefaultQueue, job.DefaultTenant)} {
		if err := f.js.DeleteConsumer(t.Context(), f.subjects.JobsStream(), name); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.redis.Client().FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	w2 := f.startWorker(workerOpts{id: "w2"})
	testenv.WaitFor(t, 30*time.Second, "the second worker consuming", w2.Consuming)
	testenv.WaitFor(t, 60*time.Second, "every kept request delivered again and acked", func() bool {
		cons, err := f.js.Consumer(t.Context(), f.subjects.JobsStream(), f.subjects.TenantConsumer(job.DefaultQueue, job.DefaultTenant))
		if err != nil {
			return false
		}
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= uint64(len(ids))
	})
	results, err := f.js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
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
