package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
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
	// The operator's way, as docs/cli.md gives it: list, refuse without --may-have-run, redrive with.
	if out, code := f.runSubmit(ctx, "jobs", "--status", "unknown"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("submit jobs --status unknown = %d %q, want job %s listed", code, out, id)
	}
	if out, code := f.runSubmit(ctx, "redrive", id); code != 125 || !strings.Contains(out, "--may-have-run") {
		t.Fatalf("submit redrive %s without --may-have-run = %d %q, want 125 naming the flag", id, code, out)
	}
	out, code := f.runSubmit(ctx, "redrive", id, "--may-have-run", "--no-wait")
	newID := strings.TrimSpace(out)
	if code != 0 || !job.ValidID(newID) || newID == id {
		t.Fatalf("submit redrive %s --may-have-run --no-wait = %d %q, want a new job's id", id, code, out)
	}
	st := f.settlement(newID, 30*time.Second)
	if st.Status != job.StatusSucceeded || st.RedriveOf != id {
		t.Errorf("new job settled %s with redrive_of %q, want succeeded and %s", st.Status, st.RedriveOf, id)
	}
	again, err := f.client.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: true})
	if err != nil || again.JobID != newID || !again.Duplicate {
		t.Errorf("repeated Redrive = %+v, %v; want %s again, marked duplicate", again, err, newID)
	}
	if n := f.dispatches()[newID]; n != 1 {
		t.Errorf("the new job was dispatched %d times, want 1", n)
	}
	if now := f.settlement(id, 10*time.Second); now.Status != old.Status || !now.SettledAt.Equal(old.SettledAt) {
		t.Errorf("old job now %+v, want it unchanged (%+v)", now, old)
	}
	if n := f.settledCounts()[id]; n != 1 {
		t.Errorf("old job has %d settlements, want 1", n)
	}
	if _, err := f.client.Redrive(ctx, newID, nil); !errors.Is(err, runfleet.ErrNotRedrivable) {
		t.Errorf("Redrive of a succeeded job = %v, want ErrNotRedrivable", err)
	}
}

// runSubmit runs the built submit against the fleet: its standard output, or with a failure its
// standard error, and its exit code.
func (f *fleet) runSubmit(ctx context.Context, args ...string) (string, int) {
	f.t.Helper()
	cmd := exec.CommandContext(ctx, submitBin, append(args, "--nats-url", f.nats.URL)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), 0
	case errors.As(err, &exit):
		return stderr.String(), exit.ExitCode()
	}
	f.t.Fatalf("submit %v: %v", args, err)
	return "", -1
}

// TestBulkRedriveSurvivesItsWorker: the worker running a bulk redrive is killed halfway; another
// takes the run over within its hold (the lease TTL) and goes on from where it was: every failed
// job is redriven once, no new job runs twice, and the run ends done with every job counted.
func TestBulkRedriveSurvivesItsWorker(t *testing.T) {
	const jobs = 40
	f := newFleet(t)
	workers := map[string]*worker{"first": f.start("first"), "second": f.start("second")}
	var ids []string
	for range jobs {
		ids = append(ids, f.submit(job.Request{Language: "python3", Code: "import sys; sys.exit(3)"}))
	}
	for _, id := range ids {
		if st := f.settlement(id, time.Minute); st.Status != job.StatusFailed {
			t.Fatalf("job %s settled %s, want failed", id, st.Status)
		}
	}
	ctx, cancel := contextWithTimeout(t, 3*time.Minute)
	defer cancel()
	testenv.WaitFor(t, 10*time.Second, "the failed jobs listed", func() bool {
		l, err := f.client.ListJobs(ctx, job.ListQuery{Status: job.StatusFailed, Count: true, Limit: 1})
		return err == nil && l.Count != nil && *l.Count == jobs
	})
	run, err := f.client.StartRedrive(ctx, job.BulkRedrive{Status: job.StatusFailed, RatePerS: 8})
	if err != nil {
		t.Fatal(err)
	}
	holder := workers[run.Worker]
	if holder == nil || run.Total != jobs {
		t.Fatalf("StartRedrive() = %+v, want %d jobs held by one of the workers", run, jobs)
	}
	testenv.WaitFor(t, time.Minute, "a quarter of the jobs redriven", func() bool {
		r, err := f.client.RedriveRun(ctx, run.ID)
		return err == nil && r.Redriven >= jobs/4
	})
	holder.kill()
	var last job.RedriveRun
	testenv.WaitFor(t, 2*time.Minute, "the run done by the other worker", func() bool {
		last, err = f.client.RedriveRun(ctx, run.ID)
		return err == nil && last.State == job.RunDone
	})
	if last.Worker == run.Worker || last.Redriven != jobs || last.Skipped != 0 || last.Failed != 0 {
		t.Errorf("run = %+v, want all %d redriven by the worker that took it over", last, jobs)
	}
	for _, id := range ids {
		st := f.settlement(job.RedriveID(id), time.Minute)
		if st.RedriveOf != id {
			t.Errorf("job %s: redrive settled with redrive_of %q", job.RedriveID(id), st.RedriveOf)
		}
	}
	// A new job the killed worker had claimed settles unknown without running; none runs twice.
	dispatches, settled := f.dispatches(), f.settledCounts()
	for _, id := range ids {
		if n, s := dispatches[job.RedriveID(id)], settled[job.RedriveID(id)]; n > 1 || s != 1 {
			t.Errorf("redrive of %s dispatched %d times and settled %d, want at most once and once", id, n, s)
		}
	}
}

// TestRebuildIndex: a Redis that lost the job index (its keys deleted here) gets it back from
// `worker --rebuild-index`, which reads the settlements kept and exits; the jobs are listed again.
func TestRebuildIndex(t *testing.T) {
	f := newFleet(t)
	f.start("w")
	ids := []string{
		f.submit(job.Request{Language: "python3", Code: "print(1)"}),
		f.submit(job.Request{Language: "python3", Code: "import sys; sys.exit(2)"}),
	}
	for _, id := range ids {
		f.settlement(id, time.Minute)
	}
	ctx, cancel := contextWithTimeout(t, time.Minute)
	defer cancel()
	listed := func() int64 {
		l, err := f.client.ListJobs(ctx, job.ListQuery{Count: true, Limit: 1})
		if err != nil || l.Count == nil {
			return -1
		}
		return *l.Count
	}
	testenv.WaitFor(t, 10*time.Second, "both jobs listed", func() bool { return listed() == 2 })
	rdb := f.redis.Client()
	keys, err := rdb.Keys(ctx, "{runfleet:index}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("index keys = %v, %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if n := listed(); n != 0 {
		t.Fatalf("listed after the index was lost = %d, want 0", n)
	}
	out, err := exec.CommandContext(ctx, workerBin, "--nats-url", f.nats.URL, "--redis-url", f.redis.URL, "--rebuild-index").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "job index: 2 settlements read, 2 rows added, 0 without their request, 0 past the retention") {
		t.Fatalf("worker --rebuild-index = %v:\n%s", err, out)
	}
	if n := listed(); n != 2 {
		t.Errorf("listed after the rebuild = %d, want 2", n)
	}
	l, err := f.client.ListJobs(ctx, job.ListQuery{Status: job.StatusFailed})
	if err != nil || len(l.Jobs) != 1 || l.Jobs[0].JobID != ids[1] || l.Jobs[0].Queue != job.DefaultQueue || l.Jobs[0].Tenant != job.DefaultTenant {
		t.Errorf("failed jobs after the rebuild = %+v, %v; want %s on the default queue and tenant", l.Jobs, err, ids[1])
	}
}
