package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// ownFleet starts a dev worker of the test's own (its embedded NATS and child Redis), so that the
// thousands of jobs a test makes delay no other test; it returns its NATS URL.
func ownFleet(t *testing.T) string {
	t.Helper()
	needWorker(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t))
	w := exec.Command(workerBin, "--dev", "--nats-url", url, "--listen", "127.0.0.1:0", "--concurrency", "4")
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log := &testenv.Buffer{}
	w.Stderr = log
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.Process.Kill()
		_ = w.Wait()
	})
	testenv.WaitFor(t, 30*time.Second, "the dev worker started", func() bool { return strings.Contains(log.String(), `"worker started"`) })
	return url
}

func submitAt(url string, args ...string) call {
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "RUNFLEET_NATS_URL" {
			return url
		}
		return ""
	}
	code := run(make(chan os.Signal), args, getenv, strings.NewReader(""), &out, &errb)
	return call{code, out.String(), errb.String()}
}

// TestBulkRedrive: 1,000 failed jobs, a dry run that counts exactly them, then a redrive of all
// of them at 200 a second, which takes about 5 s.
func TestBulkRedrive(t *testing.T) {
	const jobs, rate = 1000, 200
	url := ownFleet(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := runfleet.NewClient(t.Context(), nc, runfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	for range jobs {
		if _, err := c.Submit(t.Context(), "", job.Request{Language: "python3", Code: "import sys; sys.exit(1)"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A thousand sandboxes take about two minutes here, three times that on a loaded machine.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	testenv.WaitFor(t, 10*time.Minute, "1,000 failed jobs listed", func() bool {
		l, err := c.ListJobs(ctx, job.ListQuery{Status: job.StatusFailed, Limit: 1, Count: true})
		return err == nil && *l.Count == jobs
	})
	// Every old job settled before now; the jobs the redrive publishes settle after it.
	until := time.Now().UTC().Format(time.RFC3339Nano)
	filter := []string{"redrive", "--status", "failed", "--since", since, "--until", until}
	dry := submitAt(url, append(filter, "--dry-run")...)
	if dry.code != 0 || strings.TrimSpace(dry.stdout) != strconv.Itoa(jobs) {
		t.Fatalf("redrive --dry-run = %d %q %q, want %d", dry.code, dry.stdout, dry.stderr, jobs)
	}
	start := time.Now()
	got := submitAt(url, append(filter, "--rate", strconv.Itoa(rate))...)
	took := time.Since(start)
	t.Logf("bulk redrive of %d jobs at %d/s: %v", jobs, rate, took)
	if got.code != 0 || !strings.Contains(got.stdout, fmt.Sprintf("done: %d redriven, 0 skipped, 0 failed of %d", jobs, jobs)) {
		t.Fatalf("redrive = %d %q %q", got.code, got.stdout, got.stderr)
	}
	// 1,000 at 200 a second is 5 s: never faster (the pace holds); slower only as far as a loaded
	// machine makes it (a pace not kept at all, at one a second, would take 1,000 s).
	if want := time.Duration(jobs/rate) * time.Second; took < want-500*time.Millisecond || took > 12*want {
		t.Errorf("the run took %v, want about %v", took, want)
	}
	again := submitAt(url, append(filter, "--dry-run")...)
	if strings.TrimSpace(again.stdout) != strconv.Itoa(jobs) {
		t.Errorf("dry run after the redrive = %q, want %d: the old jobs are unchanged", again.stdout, jobs)
	}
}
