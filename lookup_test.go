package runfleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestLookupStates: a lookup tells an unknown id, a queued, a running and a settled job apart,
// with the queue and tenant of its subject, and its errors carry the id.
func TestLookupStates(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	ctx := t.Context()

	_, err := f.c.Lookup(ctx, "never-accepted")
	var je *runfleet.JobError
	if !errors.Is(err, runfleet.ErrNotFound) || !errors.As(err, &je) || je.ID != "never-accepted" {
		t.Errorf("Lookup(unknown) error = %v, want ErrNotFound in a *JobError of the id", err)
	}
	if _, err := f.c.Request(ctx, "never-accepted"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Request(unknown) error = %v, want ErrNotFound", err)
	}
	if err := f.c.Cancel(ctx, "never-accepted"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Cancel(unknown) error = %v, want ErrNotFound", err)
	}

	seq := f.submit(t, "q1", "default", "job-a")
	info, err := f.c.Lookup(ctx, "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != runfleet.JobQueued || info.Queue != "q1" || info.Tenant != "default" || info.Sequence != seq || info.Stored.IsZero() {
		t.Errorf("Lookup(queued) = %+v, want queued on q1/default at sequence %d with its time", info, seq)
	}
	// A job is its tenant and its id: another tenant's client finds nothing of it.
	acme, err := runfleet.NewClient(ctx, f.nc, runfleet.Options{Prefix: f.s.Prefix(), Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Lookup(ctx, "job-a"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("another tenant's Lookup(job-a) error = %v, want ErrNotFound", err)
	}
	if _, err := f.c.Settlement(ctx, "job-a"); !errors.Is(err, runfleet.ErrNoSettlement) {
		t.Errorf("Settlement(queued) error = %v, want ErrNoSettlement", err)
	}
	req, err := f.c.Request(ctx, "job-a")
	if err != nil || req.Queue != "q1" || req.Tenant != "default" || req.Header.Get(job.HeaderMsgID) != "job-a" {
		t.Errorf("Request(job-a) = %+v, %v, want the stored request of q1/default", req, err)
	}

	w := &writer{f: f, id: "job-a", attempt: 1}
	if err := w.page(ctx, 0, "out\n"); err != nil {
		t.Fatal(err)
	}
	if info, err := f.c.Lookup(ctx, "job-a"); err != nil || info.State != runfleet.JobRunning {
		t.Errorf("Lookup(running) = %v, %v, want running", info.State, err)
	}
	if err := w.settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	info, err = f.c.Lookup(ctx, "job-a")
	if err != nil || info.State != runfleet.JobSettled || info.Queue != "q1" || len(info.Settlement) == 0 || info.PagesExpired {
		t.Errorf("Lookup(settled) = %+v, %v, want settled with its settlement", info, err)
	}
	if st, err := f.c.Settlement(ctx, "job-a"); err != nil || st.Status != job.StatusSucceeded {
		t.Errorf("Settlement(settled) = %v, %v", st.Status, err)
	}
	if err := f.c.Cancel(ctx, "job-a"); !errors.Is(err, runfleet.ErrSettled) {
		t.Errorf("Cancel(settled) error = %v, want ErrSettled", err)
	}
}

// TestLookupCostIsConstant: a lookup makes the same number of requests to the server whatever
// the number of waiting jobs — version 1 read every waiting job's body for an id it could not
// find.
func TestLookupCostIsConstant(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	ctx := t.Context()
	requests := func(id string) uint64 {
		t.Helper()
		before := f.nc.Stats().OutMsgs
		if _, err := f.c.Settlement(ctx, id); err == nil {
			t.Fatalf("Settlement(%s) found a settlement", id)
		}
		return f.nc.Stats().OutMsgs - before
	}
	f.submit(t, "q1", "acme", "oldest")
	emptyUnknown, emptyOldest := requests("never-accepted"), requests("oldest")
	for i := range 2000 {
		f.submit(t, "q1", "acme", fmt.Sprintf("waiting-%d", i))
	}
	if got := requests("never-accepted"); got != emptyUnknown {
		t.Errorf("a lookup of an unknown id beside 2,000 waiting jobs sent %d messages, %d beside none", got, emptyUnknown)
	}
	if got := requests("oldest"); got != emptyOldest {
		t.Errorf("a lookup of the oldest waiting job beside 2,000 sent %d messages, %d beside none", got, emptyOldest)
	}
	if emptyUnknown > 3 {
		t.Errorf("a lookup sent %d messages, want at most 3", emptyUnknown)
	}
}
