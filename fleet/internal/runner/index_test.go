package runner_test

import (
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// A settled job is listed right after its settlement, with what the list shows.
func TestSettledJobsListed(t *testing.T) {
	f := newFleet(t)
	x := jobindex.New(f.redis.Client(), jobindex.Options{})
	f.startWorker(workerOpts{index: x})
	failed := f.run(job.Request{Language: "python3", Code: "import sys; sys.exit(3)", RedriveOf: "earlier-job"})
	if failed.st.RedriveOf != "earlier-job" {
		t.Errorf("settlement redrive_of = %q, want earlier-job", failed.st.RedriveOf)
	}
	ok := f.run(job.Request{Language: "python3", Code: "print(1)"})
	var l job.JobList
	// The row is written right after the settlement is stored, which the watch saw.
	testenv.WaitFor(t, 10*time.Second, "both jobs listed", func() bool {
		all, err := x.List(t.Context(), job.ListQuery{})
		return err == nil && len(all.Jobs) == 2
	})
	l, err := x.List(t.Context(), job.ListQuery{Status: job.StatusFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Jobs) != 1 {
		t.Fatalf("List(failed) = %+v, want one job", l.Jobs)
	}
	got := l.Jobs[0]
	if got.JobID != failed.st.JobID || got.Queue != job.DefaultQueue || got.Tenant != job.DefaultTenant ||
		got.Reason != job.ReasonExitNonzero || got.ExitCode == nil || *got.ExitCode != 3 ||
		got.RedriveOf != "earlier-job" || !got.SettledAt.Equal(failed.st.SettledAt) {
		t.Errorf("listed %+v, want the failed job's row (settlement %+v)", got, failed.st)
	}
	all, err := x.List(t.Context(), job.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Jobs) != 2 || all.Jobs[0].JobID != ok.st.JobID {
		t.Errorf("List() = %+v, want both jobs, newest (%s) first", all.Jobs, ok.st.JobID)
	}
}
