package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/job/jobtest"
	"github.com/runfleet/runfleet/protocol"
)

func TestEndToEndPerProfile(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	// 300 KiB that spans several 64 KiB pages, with every byte value, not UTF-8.
	want := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 1200)
	cases := []struct {
		lang, code string
	}{
		{"python3", "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 1200)\nsys.stdout.flush()\nsys.stderr.write('to stderr\\n')"},
		{"nodejs", "process.stdout.write(Buffer.from(Array.from({length: 256 * 1200}, (_, i) => i % 256)), () => process.stderr.write('to stderr\\n'))"},
	}
	for _, c := range cases {
		t.Run(c.lang, func(t *testing.T) {
			before := time.Now()
			r := f.run(job.Request{Language: c.lang, Code: c.code})
			if !bytes.Equal(r.stdout, want) {
				t.Errorf("stdout pages = %d bytes, want the %d bytes written", len(r.stdout), len(want))
			}
			if string(r.stderr) != "to stderr\n" {
				t.Errorf("stderr = %q, want %q", r.stderr, "to stderr\n")
			}
			st := r.st
			if st.Status != job.StatusSucceeded || st.ExitCode == nil || *st.ExitCode != 0 {
				t.Errorf("status = %s exit %v, want succeeded 0 (%s)", st.Status, st.ExitCode, st.Detail)
			}
			if st.StdoutBytes != int64(len(want)) || st.StderrBytes != 10 || st.Pages != int64(len(r.pages)) || len(r.pages) < 6 {
				t.Errorf("counts = %d/%d bytes in %d pages, stored %d pages; want %d/10 in ≥6 pages matching",
					st.StdoutBytes, st.StderrBytes, st.Pages, len(r.pages), len(want))
			}
			var offs [2]int64
			for i, p := range r.pages {
				s := 0
				if p.Stream == job.Stderr {
					s = 1
				}
				if p.Index != int64(i) || p.Offset != offs[s] || p.Attempt != st.Attempt || len(p.Data) > 64<<10 {
					t.Errorf("page %d: index %d offset %d attempt %d size %d; want index %d offset %d attempt %d size ≤ 64 KiB",
						i, p.Index, p.Offset, p.Attempt, len(p.Data), i, offs[s], st.Attempt)
				}
				offs[s] += int64(len(p.Data))
			}
			if st.Attempt != 1 || st.Worker != "w1" || st.Profile != c.lang || st.ProfileDigest == "" || !st.SandboxDestroyed {
				t.Errorf("settlement = attempt %d worker %q profile %q digest %q destroyed %v", st.Attempt, st.Worker, st.Profile, st.ProfileDigest, st.SandboxDestroyed)
			}
			if st.QueuedAt.Before(before.Add(-time.Second)) || st.StartedAt.Before(st.QueuedAt) || st.FinishedAt.Before(st.StartedAt) || st.SettledAt.Before(st.FinishedAt) {
				t.Errorf("timestamps out of order: queued %v started %v finished %v settled %v", st.QueuedAt, st.StartedAt, st.FinishedAt, st.SettledAt)
			}
			if st.Usage == nil || st.Usage.WallMS <= 0 && st.Usage.CPUMS == nil {
				t.Errorf("usage = %+v, want wall and cpu", st.Usage)
			}
		})
	}
}

func TestStatuses(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	cases := []struct {
		name   string
		req    job.Request
		status job.Status
		reason job.Reason
		code   *int
		stdout string
	}{
		{name: "nonzero exit", req: job.Request{Language: "python3", Code: "import sys; print('out'); sys.exit(3)"},
			status: job.StatusFailed, reason: job.ReasonExitNonzero, code: ptr(3), stdout: "out\n"},
		{name: "uncaught exception", req: job.Request{Language: "nodejs", Code: "throw new Error('boom')"},
			status: job.StatusFailed, reason: job.ReasonExitNonzero, code: ptr(1)},
		{name: "killed by signal", req: job.Request{Language: "python3", Code: "import ctypes; ctypes.string_at(0)"},
			status: job.StatusFailed, reason: job.ReasonSignal},
		{name: "timeout keeps last prints", req: job.Request{Language: "python3", Code: "import time\nprint('last words', flush=True)\ntime.sleep(30)",
			Limits: job.Limits{Timeout: 700 * time.Millisecond}}, status: job.StatusTimedOut, stdout: "last words\n"},
		{name: "oom", req: job.Request{Language: "python3", Code: "x = []\nwhile True: x.append(bytearray(8 << 20))",
			Limits: job.Limits{MemoryBytes: 64 << 20}}, status: job.StatusFailed, reason: job.ReasonOOM},
		{name: "output limit keeps output up to the bound", req: job.Request{Language: "python3", Code: "while True: print('y' * 99)",
			Limits: job.Limits{OutputBytes: 5000}}, status: job.StatusFailed, reason: job.ReasonOutputLimit, stdout: strings.Repeat(strings.Repeat("y", 99)+"\n", 50)},
		{name: "page limit", req: job.Request{Language: "python3", Code: "import time\nfor i in range(20):\n    print(i, flush=True); time.sleep(0.12)",
			Limits: job.Limits{MaxPages: 3}}, status: job.StatusFailed, reason: job.ReasonPageLimit},
		// The sandbox's supervisor holds its own tasks on top of the job's: the program gets the
		// job's 8, itself included.
		{name: "pids limit holds", req: job.Request{Language: "python3", Limits: job.Limits{Pids: 8},
			Code: "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n    print('capped', n + 1 <= 8)"},
			status: job.StatusSucceeded, stdout: "capped True\n"},
		{name: "expired deadline", req: job.Request{Language: "python3", Code: "print(1)", Deadline: time.Now().Add(-time.Minute)},
			status: job.StatusExpired},
		{name: "unknown language", req: job.Request{Language: "cobol", Code: "x"}, status: job.StatusRejected, reason: job.ReasonUnknownLanguage},
		{name: "limit above max", req: job.Request{Language: "python3", Code: "x", Limits: job.Limits{Timeout: 1 << 40 * time.Millisecond}},
			status: job.StatusRejected, reason: job.ReasonInvalidLimits},
		{name: "files and env", req: job.Request{Language: "python3", Env: map[string]string{"GREETING": "hi"},
			Files: []job.File{{Path: "data/in.txt", Content: []byte("file body")}},
			Code:  "import os; print(os.environ['GREETING'], open('data/in.txt').read())"}, status: job.StatusSucceeded, code: ptr(0), stdout: "hi file body\n"},
		{name: "preload shares scope", req: job.Request{Language: "nodejs", Preload: "const base = 40;", Code: "console.log(base + 2)"},
			status: job.StatusSucceeded, stdout: "42\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := f.run(c.req)
			if r.st.Status != c.status || r.st.Reason != c.reason {
				t.Errorf("settled %s/%s, want %s/%s (%s; stderr %q)", r.st.Status, r.st.Reason, c.status, c.reason, r.st.Detail, clip(r.stderr))
			}
			if c.code != nil && (r.st.ExitCode == nil || *r.st.ExitCode != *c.code) {
				t.Errorf("exit code = %v, want %d", r.st.ExitCode, *c.code)
			}
			if c.stdout != "" && string(r.stdout) != c.stdout {
				t.Errorf("stdout = %q, want %q", clip(r.stdout), clip([]byte(c.stdout)))
			}
			if r.st.StdoutBytes != int64(len(r.stdout)) || r.st.StderrBytes != int64(len(r.stderr)) || r.st.Pages != int64(len(r.pages)) {
				t.Errorf("settlement counts %d/%d/%d pages, stored %d/%d/%d", r.st.StdoutBytes, r.st.StderrBytes, r.st.Pages, len(r.stdout), len(r.stderr), len(r.pages))
			}
			if r.st.Reason == job.ReasonOutputLimit && r.st.StdoutBytes+r.st.StderrBytes > 5000 {
				t.Errorf("stored %d bytes past an output bound of 5000", r.st.StdoutBytes+r.st.StderrBytes)
			}
		})
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

func TestPagesArriveWhileRunning(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	id := f.submit(job.Request{Language: "python3", Code: "import time\nprint('early', flush=True)\ntime.sleep(1.5)\nprint('late')"})
	r := f.wait(id)
	if len(r.pages) != 2 {
		t.Fatalf("pages = %d, want 2 (early output published before the program ended)", len(r.pages))
	}
	if r.st.Status != job.StatusSucceeded {
		t.Errorf("status = %s", r.st.Status)
	}
}

func TestCancel(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	t.Run("running", func(t *testing.T) {
		id := f.submit(job.Request{Language: "python3", Code: "import time\nprint('started', flush=True)\ntime.sleep(60)"})
		testenv.WaitFor(t, 30*time.Second, "the program's first output stored", func() bool { return f.pagesStored(id) > 0 })
		start := time.Now()
		if err := f.client.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		r := f.wait(id)
		if r.st.Status != job.StatusCancelled || time.Since(start) > 3*time.Second {
			t.Errorf("settled %s %v after cancel, want cancelled within about a second", r.st.Status, time.Since(start))
		}
		if r.st.FinishedAt.Sub(start) > time.Second+200*time.Millisecond {
			t.Errorf("sandbox ended %v after the cancel, want within 1s", r.st.FinishedAt.Sub(start))
		}
	})
}

// TestCancelBeforeStart: a job cancelled while it waits in the queue settles cancelled when a
// worker takes it, and never runs.
func TestCancelBeforeStart(t *testing.T) {
	f := newFleet(t)
	id := f.submit(job.Request{ID: "cancelled-early", Language: "python3", Code: "print('must not run')"})
	if err := f.client.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	f.startWorker(workerOpts{})
	r := f.wait(id)
	if r.st.Status != job.StatusCancelled || len(r.stdout) != 0 || f.dispatches()[id] != 0 {
		t.Errorf("settled %s with %q, %d dispatches; want cancelled, never run", r.st.Status, r.stdout, f.dispatches()[id])
	}
}

// TestCancelStoredBeforeTheJobIsForNoJob: a cancel that another client stored for an id no job
// had yet (the client refuses to) does not cancel a job published later with that id.
func TestCancelStoredBeforeTheJobIsForNoJob(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	const id = "reused-id"
	if _, err := f.js.Publish(t.Context(), f.client.Subjects().Cancel("default", id), nil); err != nil {
		t.Fatal(err)
	}
	f.submit(job.Request{ID: id, Language: "python3", Code: "print('ran')"})
	r := f.wait(id)
	if r.st.Status != job.StatusSucceeded || string(r.stdout) != "ran\n" {
		t.Errorf("settled %s %s with %q; want succeeded: the earlier cancel named no job", r.st.Status, r.st.Detail, r.stdout)
	}
}

func TestBadInputDoesNotBlockTheQueue(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{concurrency: 1})
	sub, err := f.client.SubmitRaw(t.Context(), "default", "bad-json", []byte("{not json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := f.wait(sub.ID)
	if r.st.Status != job.StatusRejected || r.st.Reason != job.ReasonInvalidJSON {
		t.Errorf("settled %s/%s, want rejected/invalid_json", r.st.Status, r.st.Reason)
	}
	if good := f.run(job.Request{Language: "python3", Code: "print('next')"}); string(good.stdout) != "next\n" {
		t.Errorf("next job stdout = %q, want %q", good.stdout, "next\n")
	}
}

func TestTwoWorkersShareTheWork(t *testing.T) {
	f := newFleet(t)
	w1 := f.startWorker(workerOpts{id: "w1", concurrency: 2})
	w2 := f.startWorker(workerOpts{id: "w2", concurrency: 2})
	// Both listen before the jobs come: a worker still setting up hears of them at its next sweep
	// only, and under load the other had run them all by then.
	testenv.WaitFor(t, time.Minute, "both workers consuming", func() bool { return w1.Consuming() && w2.Consuming() })
	const n = 16
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3", Code: "import time; time.sleep(0.3); print('done')"})
	}
	by := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			r := f.wait(id)
			mu.Lock()
			defer mu.Unlock()
			by[r.st.Worker]++
			if r.st.Status != job.StatusSucceeded {
				t.Errorf("job %s settled %s", id, r.st.Status)
			}
		})
	}
	wg.Wait()
	if by["w1"] == 0 || by["w2"] == 0 || by["w1"]+by["w2"] != n {
		t.Errorf("jobs per worker = %v, want both to take some of %d", by, n)
	}
	for _, id := range ids {
		if got := f.dispatches()[id]; got != 1 {
			t.Errorf("job %s dispatched %d times, want 1", id, got)
		}
	}
}

// TestOneFetchFillsTheFreeSlots checks that a worker with free slots and jobs waiting asks for a
// job per free slot in one pull request, not one request per job: a fetch per job bounded a worker
// to about 600 jobs/s whatever its slots (internal/cmd/cpbench).
func TestOneFetchFillsTheFreeSlots(t *testing.T) {
	f := newFleet(t)
	const slots, n = 6, 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3", Code: "pass"})
	}
	var mu sync.Mutex
	var batches []int
	sub, err := f.nats.Conn().Subscribe("$JS.API.CONSUMER.MSG.NEXT."+f.subjects.JobsStream()+"."+f.subjects.TenantConsumer("default", "default"), func(m *nats.Msg) {
		var req struct {
			Batch int `json:"batch"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("pull request %q: %v", m.Data, err)
		}
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, req.Batch)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.nats.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	f.startWorker(workerOpts{concurrency: slots})
	for _, id := range ids {
		if r := f.wait(id); r.st.Status != job.StatusSucceeded {
			t.Errorf("job %s settled %s %s", id, r.st.Status, r.st.Detail)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) == 0 || batches[0] != slots {
		t.Errorf("pull requests asked for %v jobs, want the first to ask for %d (every slot free, %d jobs waiting)", batches, slots, n)
	}
}

// TestBadInputCorpus sends every invalid message through the real queue: each gets one rejected
// settlement with its reason (or a record on the rejected subject), and the next good job runs.
func TestBadInputCorpus(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{concurrency: 2})
	p := job.DefaultPolicy()
	corpus := jobtest.BadInputs(p.MaxBodyBytes)
	for _, c := range corpus {
		if _, err := f.client.SubmitRaw(t.Context(), "default", c.ID, []byte(c.Body), nil); err != nil {
			t.Fatalf("%s: SubmitRaw() error = %v", c.Name, err)
		}
	}
	for _, c := range jobtest.UnreadableJobs {
		m := nats.NewMsg(f.subjects.Job("default", c.Tenant, c.ID))
		m.Data = []byte(`{"language":"python3","code":"print(1)"}`)
		if c.MsgID != "" {
			m.Header.Set(job.HeaderMsgID, c.MsgID)
		}
		if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatalf("%s: publish error = %v", c.Name, err)
		}
	}
	for _, c := range corpus {
		t.Run(c.Name, func(t *testing.T) {
			r := f.wait(c.ID)
			if r.st.Status != job.StatusRejected || r.st.Reason != c.Reason {
				t.Errorf("settled %s/%s, want rejected/%s", r.st.Status, r.st.Reason, c.Reason)
			}
		})
	}
	if good := f.run(job.Request{Language: "python3", Code: "print('still serving')"}); string(good.stdout) != "still serving\n" {
		t.Errorf("good job after the corpus: stdout %q", good.stdout)
	}
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	results, err := js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	ri, err := results.Info(t.Context(), jetstream.WithSubjectFilter(f.subjects.Rejected()))
	if err != nil {
		t.Fatal(err)
	}
	if got := ri.State.Subjects[f.subjects.Rejected()]; got != uint64(len(jobtest.UnreadableJobs)) {
		t.Errorf("records on the rejected subject = %d, want %d", got, len(jobtest.UnreadableJobs))
	}
	jobs, err := js.Stream(t.Context(), f.subjects.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	// The stream keeps every request it served; the unreadable ones are deleted.
	want := uint64(len(corpus) + 1)
	testenv.WaitFor(t, 30*time.Second, "the unreadable messages removed from the jobs stream", func() bool {
		ji, err := jobs.Info(t.Context())
		return err == nil && ji.State.Msgs == want
	})
	if n := f.dispatches(); len(n) != 1 {
		t.Errorf("dispatches = %v, want only the good job", n)
	}
}

// TestPreDispatchFailuresSettleError gives a job a profile whose sandbox cannot start: each try
// is counted in the record, retried with backoff, and after MaxFailures the job settles error
// without ever being dispatched.
func TestPreDispatchFailuresSettleError(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{profiles: profile.Set{"broken": {Name: "broken", Interpreter: []string{"/nonexistent/python"}}}})
	start := time.Now()
	r := f.run(job.Request{Language: "broken", Code: "print(1)"})
	if r.st.Status != job.StatusError || r.st.Reason != job.ReasonInfrastructure {
		t.Errorf("settled %s/%s (%s), want error/infrastructure", r.st.Status, r.st.Reason, r.st.Detail)
	}
	if d := f.dispatches(); len(d) != 0 {
		t.Errorf("dispatches = %v, want none", d)
	}
	if r.st.Attempt != 4 {
		t.Errorf("settled at attempt %d, want 4 (3 failed tries, then the settlement)", r.st.Attempt)
	}
	t.Logf("3 failed tries and the settlement took %v", time.Since(start))
}

// TestJobPrintsForItsWholeTimeout: publishing lives as long as the job may run, not a fixed
// budget (the harness's settle budget is 10 s; the job prints for 40 s).
func TestJobPrintsForItsWholeTimeout(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(workerOpts{})
	r := f.run(job.Request{Language: "python3", Limits: job.Limits{Timeout: time.Minute},
		Code: "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(1)"})
	lines := strings.Fields(string(r.stdout))
	if r.st.Status != job.StatusSucceeded || len(lines) != 40 || lines[39] != "39" {
		t.Fatalf("settled %s/%s (%s) with %d lines, want succeeded with 40", r.st.Status, r.st.Reason, r.st.Detail, len(lines))
	}
	if r.st.Pages != int64(len(r.pages)) || r.st.StdoutBytes != int64(len(r.stdout)) {
		t.Errorf("settlement counts %d pages %d bytes, stored %d pages %d bytes", r.st.Pages, r.st.StdoutBytes, len(r.pages), len(r.stdout))
	}
}

// TestChattyJobWithinDefaultPages prints a line every 100 ms for 12 s under default limits, over
// several heartbeats of a short lease (the race detector watches the lease shared by the pager
// and the heartbeat).
func TestChattyJobWithinDefaultPages(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker(workerOpts{ttl: 2 * time.Second})
	r := f.run(job.Request{Language: "python3", Limits: job.Limits{Timeout: 20 * time.Second},
		Code: "import time\nfor i in range(120):\n    print('line', i, flush=True)\n    time.sleep(0.1)"})
	if r.st.Status != job.StatusSucceeded || strings.Count(string(r.stdout), "\n") != 120 {
		t.Fatalf("settled %s/%s with %d lines, want succeeded with 120", r.st.Status, r.st.Reason, strings.Count(string(r.stdout), "\n"))
	}
	for i, p := range r.pages {
		if p.Index != int64(i) {
			t.Fatalf("page %d has index %d", i, p.Index)
		}
	}
	t.Logf("12 s of 100 ms lines: %d pages", len(r.pages))
}

// TestJobEnvArrivesWithThePayload: a job's env acts only inside the program, after the dispatch;
// NODE_OPTIONS set at the sandbox's start would have made node fail before the payload.
func TestJobEnvArrivesWithThePayload(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{})
	r := f.run(job.Request{Language: "nodejs", Env: map[string]string{"NODE_OPTIONS": "--require /nonexistent"},
		Code: "console.log(process.env.NODE_OPTIONS)"})
	if r.st.Status != job.StatusSucceeded || string(r.stdout) != "--require /nonexistent\n" {
		t.Errorf("settled %s/%s, stdout %q stderr %q; want succeeded printing the value", r.st.Status, r.st.Reason, r.stdout, clip(r.stderr))
	}
}

// TestSilentRedisEndsTheSandbox pauses Redis under a running job: the worker cannot extend its
// lease, and its trust window's own timer kills the sandbox by the window's end. After Redis
// comes back, the job settles unknown, counting the page the first attempt stored.
func TestSilentRedisEndsTheSandbox(t *testing.T) {
	f := newFleet(t)
	const ttl = 2 * time.Second
	f.startWorker(workerOpts{ttl: ttl})
	marker := newMarker()
	id := f.submit(job.Request{Language: "python3", Code: markedSleep(marker, 120), Limits: job.Limits{Timeout: 3 * time.Minute}})
	testenv.WaitFor(t, 30*time.Second, "sandbox started", func() bool { return len(pidsWithArg(marker)) > 0 })
	f.redis.Pause()
	gone := testenv.WaitFor(t, ttl+10*time.Second, "sandbox gone after Redis paused", func() bool { return len(pidsWithArg(marker)) == 0 })
	f.redis.Resume()
	t.Logf("sandbox gone %v after Redis paused (lease TTL %v)", gone, ttl)
	if gone > ttl+time.Second {
		t.Errorf("sandbox outlived the trust window: gone after %v, TTL %v", gone, ttl)
	}
	r := f.wait(id)
	if r.st.Status != job.StatusUnknown || r.st.Pages != int64(len(r.pages)) || r.st.StdoutBytes != int64(len(r.stdout)) {
		t.Errorf("settled %s with %d pages %d bytes; stored %d pages %d bytes; want unknown counting what is stored",
			r.st.Status, r.st.Pages, r.st.StdoutBytes, len(r.pages), len(r.stdout))
	}
	if got := f.dispatches()[id]; got != 1 {
		t.Errorf("dispatched %d times, want 1", got)
	}
}

// TestCancelWhileReconnecting publishes a cancel while the worker is disconnected from NATS: the
// cancel watch resumes where it left off and still kills the job.
func TestCancelWhileReconnecting(t *testing.T) {
	f := newFleet(t)
	f.startWorker(workerOpts{reconnect: 2 * time.Second})
	marker := newMarker()
	id := f.submit(job.Request{Language: "python3", Code: markedSleep(marker, 60), Limits: job.Limits{Timeout: 90 * time.Second}})
	testenv.WaitFor(t, 30*time.Second, "sandbox started", func() bool { return len(pidsWithArg(marker)) > 0 })
	f.nats.Restart()
	client, err := runfleet.NewClient(t.Context(), f.nats.Conn(), runfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if r := f.wait(id); r.st.Status != job.StatusCancelled {
		t.Errorf("settled %s/%s, want cancelled", r.st.Status, r.st.Reason)
	}
}

// TestRepublishedID republishes a settled job's id, at once and past JetStream's duplicate
// window: the client sends no Nats-Msg-Id, so the jobs stream refuses it by its subject (one
// message per job subject), the publisher is told it is a duplicate, and nothing runs.
func TestRepublishedID(t *testing.T) {
	f := newFleetWith(t, protocol.StreamOptions{Duplicates: time.Second})
	f.startWorker(workerOpts{})
	req := job.Request{ID: "same-id", Language: "python3", Code: "print('once')"}
	if first := f.run(req); first.st.Status != job.StatusSucceeded {
		t.Fatalf("first run settled %s", first.st.Status)
	}
	sub, err := f.client.Submit(t.Context(), "", req, nil)
	if err != nil || !sub.Duplicate || sub.Sequence != 0 {
		t.Fatalf("Submit() again = %+v, %v; want a duplicate refused by the subject, no error", sub, err)
	}
	jobs, err := f.js.Stream(t.Context(), f.subjects.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := jobs.Info(t.Context()); err != nil || info.State.Msgs != 1 {
		t.Errorf("jobs stream holds %v messages (%v), want the first request only", info.State.Msgs, err)
	}
	cons, err := f.js.Consumer(t.Context(), f.subjects.JobsStream(), f.subjects.TenantConsumer("default", "default"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "nothing left to deliver", func() bool {
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
	if got := f.dispatches()[req.ID]; got != 1 {
		t.Errorf("dispatches = %d, want 1", got)
	}
	if st, err := f.client.Watch(t.Context(), req.ID, nil); err != nil || st.Attempt != 1 {
		t.Errorf("settlement = attempt %d (%v), want the first attempt's", st.Attempt, err)
	}
}

// TestSameIDOnAnotherTenant: a job id published under another tenant, at once (no Nats-Msg-Id,
// so no duplicate window joins them), is another job: the stream stores it on its own subject,
// the worker runs it under its own record, and each tenant reads its own settlement and output.
func TestSameIDOnAnotherTenant(t *testing.T) {
	f := newFleetWith(t, protocol.StreamOptions{Duplicates: time.Second})
	f.startWorker(workerOpts{})
	req := job.Request{ID: "one-id", Language: "python3", Code: "print('default')"}
	f.submitAs("default", req)
	req.Code = "print('acme')"
	if id := f.submitAs("acme", req); id != "one-id" {
		t.Fatalf("acme's job id = %q", id)
	}
	for tenant, want := range map[string]string{"default": "default\n", "acme": "acme\n"} {
		var out []byte
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		st, err := f.as(tenant).Watch(ctx, "one-id", func(p runfleet.Page) error { out = append(out, p.Data...); return nil })
		cancel()
		if err != nil || st.Status != job.StatusSucceeded || st.Attempt != 1 || string(out) != want {
			t.Errorf("%s's job = %s attempt %d, %q (%v); want its own output, run once", tenant, st.Status, st.Attempt, out, err)
		}
	}
	if got := f.dispatches()[req.ID]; got != 2 {
		t.Errorf("dispatches of the id = %d, want 2: one per tenant's job", got)
	}
	results, err := f.js.Stream(t.Context(), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := results.GetLastMsgForSubject(t.Context(), f.subjects.Rejected()); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a rejection was recorded (%v), want none", err)
	}
}

// TestStatusHeadedJobs: jobs a tenant published with a server status's headers (Status 404 ends a
// jetstream fetch, 100 is a heartbeat it never hands back), stored before a victim tenant's job,
// neither stall discovery nor the pulls: each settles rejected/reserved_header and the victim's
// job runs.
func TestStatusHeadedJobs(t *testing.T) {
	f := newFleet(t)
	var hostile []string
	for i, h := range []nats.Header{
		{"Status": {"404"}, "Description": {"No Messages"}},
		{"Status": {"100"}},
		{"Status": {"408"}},
		{"Status": {"100"}, "Description": {"Idle Heartbeat"}, "Nats-Last-Consumer": {"0"}},
	} {
		id := "poison-" + strconv.Itoa(i)
		m := &nats.Msg{Subject: f.subjects.Job("default", "mallory", id), Header: h}
		if i%2 == 1 {
			m.Data = []byte(`{"language":"python3","code":"print('poisoned')"}`)
		}
		if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		hostile = append(hostile, id)
		f.tenants.Store(id, "mallory")
	}
	victim := f.submitAs("victim", job.Request{Language: "python3", Code: "print('victim ran')"})
	f.startWorker(workerOpts{concurrency: 1})

	if r := f.wait(victim); r.st.Status != job.StatusSucceeded || string(r.stdout) != "victim ran\n" {
		t.Errorf("victim settled %s/%s, stdout %q; want succeeded", r.st.Status, r.st.Reason, r.stdout)
	}
	for _, id := range hostile {
		if r := f.wait(id); r.st.Status != job.StatusRejected || r.st.Reason != job.ReasonReservedHeader {
			t.Errorf("%s settled %s/%s, want rejected/%s", id, r.st.Status, r.st.Reason, job.ReasonReservedHeader)
		}
	}
}
