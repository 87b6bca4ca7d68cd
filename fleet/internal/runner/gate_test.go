package runner_test

import (
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestDispatchGate: the dispatch marker, not the Redis record, decides whether a job may have
// run. An attempt that reserved the job and died before the gate leaves a record that says
// "maybe": the job runs, once. An attempt that passed the gate leaves a marker: the job settles
// unknown, also when Redis lost the record and a fresh claim would run it again.
func TestDispatchGate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		passGate   bool // the dead attempt stored its marker
		flush      bool // Redis then lost every record
		want       job.Status
		dispatches int
	}{
		{name: "reserved, died before the gate", want: job.StatusSucceeded, dispatches: 1},
		{name: "passed the gate, died", passGate: true, want: job.StatusUnknown},
		{name: "passed the gate, record lost", passGate: true, flush: true, want: job.StatusUnknown},
		{name: "reserved, record lost", flush: true, want: job.StatusSucceeded, dispatches: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			ctx := t.Context()
			id := f.submit(job.Request{Language: "python3", Code: "print('ran')"})
			dead := f.reserveAndDie(id)
			if tc.passGate {
				if err := queue.NewResults(f.js, f.subjects).PassGate(ctx, "default", id, dead.Generation(), "dead"); err != nil {
					t.Fatal(err)
				}
			}
			f.leaseRunsOut(id)
			if tc.flush {
				if err := f.redis.Client().FlushDB(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}

			f.startWorker(workerOpts{concurrency: 1})
			r := f.wait(id)
			if r.st.Status != tc.want {
				t.Errorf("settled %s/%s (%s), want %s", r.st.Status, r.st.Reason, r.st.Detail, tc.want)
			}
			if got := f.dispatches()[id]; got != tc.dispatches {
				t.Errorf("dispatched %d times, want %d", got, tc.dispatches)
			}
		})
	}
}

// reserveAndDie is a worker of the test's own that claims and reserves job id, and dies: its
// lease runs out within a second (leaseRunsOut waits for it).
func (f *fleet) reserveAndDie(id string) *lease.Lease {
	f.t.Helper()
	ctx := f.t.Context()
	leases := lease.NewStore(f.redis.Client(), lease.Options{TTL: 300 * time.Millisecond})
	if err := leases.Init(ctx); err != nil {
		f.t.Fatal(err)
	}
	dead, err := leases.Claim(ctx, "default", id, "dead", lease.Delivery{Count: 1, QueuedAt: time.Now(), Subject: f.subjects.Job("default", "default", id)})
	if err != nil || dead.Lease == nil {
		f.t.Fatalf("Claim() = %+v, %v", dead, err)
	}
	if err := dead.Lease.Reserve(ctx, "sha256:x", "digest", "namespace"); err != nil {
		f.t.Fatal(err)
	}
	return dead.Lease
}

// leaseRunsOut waits until no worker holds job id's lease.
func (f *fleet) leaseRunsOut(id string) {
	f.t.Helper()
	leases := lease.NewStore(f.redis.Client(), lease.Options{})
	testenv.WaitFor(f.t, 10*time.Second, "the dead attempt's lease to run out", func() bool { return !leases.Held(f.t.Context(), "default", id) })
}
