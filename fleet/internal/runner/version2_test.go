package runner_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// TestVersion2MessagesAreHarmless: on streams a version-2 fleet made (which keep its subjects), a
// version-2 publisher's job (Nats-Msg-Id equal to its id) runs, and what version 2 named by id
// alone — a cancel, results, a dispatch marker — neither crashes the worker nor touches the job.
func TestVersion2MessagesAreHarmless(t *testing.T) {
	f := newFleet(t)
	p := f.subjects.Prefix()
	for name, subject := range map[string]string{f.subjects.ControlStream(): p + ".cancel.*", f.subjects.ResultsStream(): p + ".dispatched.*"} {
		st, err := f.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		if !slices.Contains(cfg.Subjects, subject) {
			cfg.Subjects = append(cfg.Subjects, subject)
			if _, err := f.js.UpdateStream(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	const id = "v2-shaped"
	for subject, body := range map[string]string{
		p + ".dispatched." + id:           "",
		p + ".results." + id + ".page":    "not this job's output",
		p + ".results." + id + ".settled": `{"job_id":"v2-shaped","status":"failed"}`,
	} {
		if _, err := f.js.Publish(t.Context(), subject, []byte(body)); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	m := nats.NewMsg(f.subjects.Job("default", "default", id))
	m.Header.Set(job.HeaderMsgID, id) // as a version-2 publisher sends it
	m.Data = []byte(`{"id":"v2-shaped","language":"python3","code":"import time; print('started', flush=True); time.sleep(1); print('ran')"}`)
	if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	f.startWorker(workerOpts{})
	sub, err := f.nats.Conn().SubscribeSync(f.subjects.WatchPage("default", id))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := sub.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("the job's first page: %v", err)
	}
	// A version-2 cancel of the running job's id names no tenant: it cancels nothing.
	if _, err := f.js.Publish(t.Context(), p+".cancel."+id, nil); err != nil {
		t.Fatal(err)
	}
	if r := f.wait(id); r.st.Status != job.StatusSucceeded || string(r.stdout) != "started\nran\n" || f.dispatches()[id] != 1 {
		t.Errorf("the version-2 publisher's job = %s/%s %q, %d dispatches; want it run once", r.st.Status, r.st.Reason, r.stdout, f.dispatches()[id])
	}
	if r := f.run(job.Request{Language: "python3", Code: "print('next')"}); string(r.stdout) != "next\n" {
		t.Errorf("the next job = %s %q, want the worker still serving", r.st.Status, r.stdout)
	}
	results, err := f.js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := results.GetLastMsgForSubject(t.Context(), f.subjects.Rejected()); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a rejection was recorded (%v), want none", err)
	}
}
