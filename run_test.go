package runfleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestRunContextEnds: when ctx ends before the settlement, Run's error carries the job's id
// (also one Run chose) with ErrNoSettlement and ctx's error; the job goes on, unless
// CancelOnDone, which stores its cancel.
func TestRunContextEnds(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	req := job.Request{Language: "python3", Code: "import time; time.sleep(60)"}
	for _, tc := range []struct {
		name, queue string
		cancel      bool
	}{{"job goes on", "q1", false}, {"CancelOnDone", "q2", true}} {
		t.Run(tc.name, func(t *testing.T) {
			req.ID = job.NewID()
			// No worker serves this prefix: the job's first page is stored as one would store it,
			// so that Run follows a running job until its ctx ends.
			w := &writer{f: f, id: req.ID, attempt: 1}
			if err := w.page(t.Context(), 0, "started\n"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			_, err := f.c.Run(ctx, tc.queue, req, &runfleet.RunOptions{CancelOnDone: tc.cancel, OnPage: func(runfleet.Page) error {
				cancel()
				return nil
			}})
			var je *runfleet.JobError
			if !errors.As(err, &je) || je.ID != req.ID || !errors.Is(err, runfleet.ErrNoSettlement) || !errors.Is(err, context.Canceled) {
				t.Errorf("Run() error = %v, want a *JobError of %s with ErrNoSettlement and context.Canceled", err, req.ID)
			}
			control, err := f.js.Stream(t.Context(), f.s.ControlStream())
			if err != nil {
				t.Fatal(err)
			}
			_, err = control.GetLastMsgForSubject(t.Context(), f.s.Cancel("default", req.ID))
			if stored := err == nil; stored != tc.cancel || (err != nil && !errors.Is(err, jetstream.ErrMsgNotFound)) {
				t.Errorf("cancel stored = %v (lookup error %v), want %v", stored, err, tc.cancel)
			}
		})
	}

	ended, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
	defer cancel()
	<-ended.Done()
	_, err := f.c.Run(ended, "q3", job.Request{Language: "python3", Code: "print(1)"}, nil)
	var je *runfleet.JobError
	if !errors.As(err, &je) || !job.ValidID(je.ID) {
		t.Errorf("Run() that could not submit: error = %v, want a *JobError naming the id it chose", err)
	}
}

// TestOutputBoundedByTheJobsLimit: Output keeps at most the request's output_bytes of what the
// pages hold, stdout and stderr together, and calls the caller's OnPage for every page.
func TestOutputBoundedByTheJobsLimit(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	for _, tc := range []struct {
		name   string
		limit  int64
		stdout string
	}{{"bounded", 12, "0123456789ab"}, {"default bound", 0, "0123456789abcdefghij"}} {
		t.Run(tc.name, func(t *testing.T) {
			id := job.NewID()
			// No worker serves this prefix: the results are stored as a worker would, beyond the
			// limit, before the request.
			w := &writer{f: f, id: id, attempt: 1}
			for i, data := range []string{"0123456789", "abcdefghij"} {
				if err := w.page(t.Context(), i, data); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.settle(t.Context(), 2); err != nil {
				t.Fatal(err)
			}
			var pages int
			req := job.Request{ID: id, Language: "python3", Code: "x", Limits: job.Limits{OutputBytes: tc.limit}}
			res, err := f.c.Output(t.Context(), "q", req, &runfleet.RunOptions{OnPage: func(runfleet.Page) error {
				pages++
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tc.stdout || len(res.Stderr) != 0 || pages != 2 || res.Settlement.JobID != id {
				t.Errorf("Output() = stdout %q stderr %q settlement of %q after %d pages, want stdout %q, no stderr, %q after 2",
					res.Stdout, res.Stderr, res.Settlement.JobID, pages, tc.stdout, id)
			}
		})
	}
}
