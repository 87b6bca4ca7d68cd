package e2e

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestJobsStreamFull: a worker started with a small --jobs-max-bytes bounds the existing jobs
// stream to it. Publishing fills it, kept requests and all, until a publish is refused with
// ErrStreamFull carrying the id; the refused job is not stored, every stored one still runs and
// stays stored (nothing dropped), and the worker's metrics show the stream full.
func TestJobsStreamFull(t *testing.T) {
	f := newFleet(t)
	const bound = 64 << 10
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	f.start("bounded", "--jobs-max-bytes", "64KiB", "--retention", "1h", "--listen", addr)
	jobs, err := f.js.Stream(t.Context(), "RUNFLEET_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the worker bounded the jobs stream", func() bool {
		info, err := jobs.Info(t.Context())
		return err == nil && info.Config.MaxBytes == bound && info.Config.MaxAge == time.Hour
	})
	testenv.WaitFor(t, time.Minute, "the worker ready", func() bool { code, _ := get(t, "http://"+addr+"/readyz"); return code == 200 })

	pad := "# " + strings.Repeat("x", 4000) + "\n"
	var stored []string
	var full error
	for i := 0; full == nil; i++ {
		if i > 2*bound/len(pad) {
			t.Fatalf("%d jobs of %d bytes stored in a stream bounded to %d bytes", i, len(pad), bound)
		}
		sub, err := f.client.Submit(t.Context(), "", job.Request{Language: "python3", Code: pad + "print(" + strconv.Itoa(i) + ")"}, nil)
		switch {
		case err == nil:
			stored = append(stored, sub.ID)
		case errors.Is(err, runfleet.ErrStreamFull):
			var je *runfleet.JobError
			if !errors.As(err, &je) || je.ID != sub.ID || sub.ID == "" {
				t.Errorf("Submit() = %+v, %v; want the id in the result and in a *JobError", sub, err)
			}
			if _, gerr := jobs.GetLastMsgForSubject(t.Context(), f.client.Subjects().Job(job.DefaultQueue, job.DefaultTenant, sub.ID)); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
				t.Errorf("the refused job %s: lookup error = %v, want it not stored", sub.ID, gerr)
			}
			full = err
		default:
			t.Fatalf("Submit() error = %v, want none or ErrStreamFull", err)
		}
	}
	t.Logf("%d jobs stored before the stream refused one: %v", len(stored), full)
	for _, id := range stored {
		if st := f.settlement(id, 2*time.Minute); st.Status != job.StatusSucceeded {
			t.Errorf("job %s settled %s/%s", id, st.Status, st.Reason)
		}
	}
	if info, err := jobs.Info(t.Context()); err != nil || info.State.Msgs != uint64(len(stored)) {
		t.Errorf("jobs stream holds %d messages (%v), want the %d stored: none dropped", info.State.Msgs, err, len(stored))
	}
	testenv.WaitFor(t, time.Minute, "the metrics show the jobs stream nearly full", func() bool {
		_, body := get(t, "http://"+addr+"/metrics")
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "runfleet_jobs_stream_fullness "); ok {
				x, err := strconv.ParseFloat(v, 64)
				return err == nil && x > 0.9 && x <= 1
			}
		}
		return false
	})
}
