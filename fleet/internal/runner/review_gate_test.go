package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// failFirstCreate fails its first Create, as a daemon hiccup or a full disk does.
type failFirstCreate struct {
	sandbox.Provider
	n *atomic.Int32
}

func (p failFirstCreate) Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error) {
	if p.n.Add(1) == 1 {
		return nil, errors.New("review: create failed once")
	}
	return p.Provider.Create(ctx, shape)
}

// TestReviewInDoubtReleaseAfterGate (review): a job an earlier attempt reserved and died with
// before the gate, whose next attempt then fails before dispatch (here the sandbox's create, once),
// runs once: an attempt in doubt that stored its marker early made the attempt after it settle
// unknown a job no attempt ever dispatched.
func TestReviewInDoubtReleaseAfterGate(t *testing.T) {
	f := newFleet(t)
	id := f.submit(job.Request{Language: "python3", Code: "print('ran')"})
	f.reserveAndDie(id)
	f.leaseRunsOut(id)

	p, _ := f.provider(false)
	f.startWorker(workerOpts{concurrency: 1, provider: failFirstCreate{p, new(atomic.Int32)}})
	r := f.wait(id)
	if r.st.Status != job.StatusSucceeded {
		t.Errorf("settled %s/%s (%s), want succeeded: no attempt dispatched it", r.st.Status, r.st.Reason, r.st.Detail)
	}
	if got := f.dispatches()[id]; got != 1 {
		t.Errorf("dispatched %d times, want 1", got)
	}
}
