package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestRedriveUnknown: a job whose worker died while it ran settles unknown, is listed as such,
// and runs again only when the caller confirms it may have run; the new job names it in
// redrive_of, a repeated redrive finds the same new job, and the old job stays as it was.
func TestRedriveUnknown(t *testing.T) {
	f := newFleet(t)
	victim := f.start("victim", "--crash-at", "running")
	id := f.submit(job.Request{Language: "python3", Code: "import time; time.sleep(0.6); print('ran')"})
	victim.exited(t, 30*time.Second)
	f.start("rescuer")
	old := f.settlement(id, 30*time.Second)
	if old.Status != job.StatusUnknown {
		t.Fatalf("status = %s (%s), want unknown", old.Status, old.Reason)
	}
	ctx, cancel := contextWithTimeout(t, time.Minute)
	defer cancel()
	var l job.JobList
	// The row is written right after the settlement is stored, which the watch saw.
	testenv.WaitFor(t, 10*time.Second, "the unknown job listed", func() bool {
		var err error
		l, err = f.client.ListJobs(ctx, job.ListQuery{Status: job.StatusUnknown})
		return err == nil && len(l.Jobs) > 0
	})
	if len(l.Jobs) != 1 || l.Jobs[0].JobID != id || l.Jobs[0].Reason != old.Reason {
		t.Fatalf("ListJobs(unknown) = %+v, want job %s", l.Jobs, id)
	}
	if _, err := f.client.Redrive(ctx, id, nil); !errors.Is(err, runfleet.ErrMayHaveRun) {
		t.Fatalf("Redrive without confirmation = %v, want ErrMayHaveRun", err)
	}
	r, err := f.client.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.JobID == id || r.RedriveOf != id || r.Duplicate {
		t.Errorf("Redrive = %+v, want a new job redriving %s", r, id)
	}
	st := f.settlement(r.JobID, 30*time.Second)
	if st.Status != job.StatusSucceeded || st.RedriveOf != id {
		t.Errorf("new job settled %s with redrive_of %q, want succeeded and %s", st.Status, st.RedriveOf, id)
	}
	again, err := f.client.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: true})
	if err != nil || again.JobID != r.JobID || !again.Duplicate {
		t.Errorf("repeated Redrive = %+v, %v; want %s again, marked duplicate", again, err, r.JobID)
	}
	if n := f.dispatches()[r.JobID]; n != 1 {
		t.Errorf("the new job was dispatched %d times, want 1", n)
	}
	if now := f.settlement(id, 10*time.Second); now.Status != old.Status || !now.SettledAt.Equal(old.SettledAt) {
		t.Errorf("old job now %+v, want it unchanged (%+v)", now, old)
	}
	if n := f.settledCounts()[id]; n != 1 {
		t.Errorf("old job has %d settlements, want 1", n)
	}
	if _, err := f.client.Redrive(ctx, r.JobID, nil); !errors.Is(err, runfleet.ErrNotRedrivable) {
		t.Errorf("Redrive of a succeeded job = %v, want ErrNotRedrivable", err)
	}
}
