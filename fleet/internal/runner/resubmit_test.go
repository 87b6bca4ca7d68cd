package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestResubmittedIDRefused: an id submitted again once its first request left the jobs stream
// (its MaxAge), while its record and settlement are kept, is stored; the worker then refuses it
// as a duplicate, recorded on the rejected subject and deleted, and never acks it as settled
// (issue 38 item 5).
func TestResubmittedIDRefused(t *testing.T) {
	f := newFleetWith(t, protocol.StreamOptions{Duplicates: time.Second})
	f.startWorker(workerOpts{})
	first := f.run(job.Request{Language: "python3", Code: "print(1)"})
	if first.st.Status != job.StatusSucceeded {
		t.Fatalf("first request settled %s %s", first.st.Status, first.st.Detail)
	}
	id := first.st.JobID
	subject := f.subjects.Job(job.DefaultQueue, job.DefaultTenant, id)
	jobs, err := f.js.Stream(t.Context(), f.subjects.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.DeleteMsg(t.Context(), m.Sequence); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the id stored again, past the duplicate window", func() bool {
		sub, err := f.client.Submit(t.Context(), "", job.Request{ID: id, Language: "python3", Code: "print(2)"}, nil)
		return err == nil && !sub.Duplicate
	})

	results, err := f.js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the second request refused as a duplicate", func() bool {
		m, err := results.GetLastMsgForSubject(t.Context(), f.subjects.Rejected())
		if err != nil {
			return false
		}
		var rec job.Rejection
		return json.Unmarshal(m.Data, &rec) == nil && rec.Subject == subject && rec.Reason == job.ReasonDuplicateID
	})
	testenv.WaitFor(t, 10*time.Second, "the second request deleted", func() bool {
		_, err := jobs.GetLastMsgForSubject(t.Context(), subject)
		return err != nil
	})
	if st, err := f.client.Settlement(t.Context(), id); err != nil || st.QueuedAt != first.st.QueuedAt {
		t.Errorf("Settlement(%s) = queued %v, %v; want the first request's, queued %v", id, st.QueuedAt, err, first.st.QueuedAt)
	}
	if d := f.dispatches()[id]; d != 1 {
		t.Errorf("job %s dispatched %d times, want 1", id, d)
	}
}
