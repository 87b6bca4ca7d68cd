package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// natsURL is a real JetStream with a real worker process behind it, shared by the tests.
var natsURL string

// workerMissing says why no worker runs behind natsURL; the tests that need one skip with it.
var workerMissing string

func needWorker(t *testing.T) {
	t.Helper()
	if workerMissing != "" {
		testenv.Missing(t, "%s", workerMissing)
	}
}

// workerBin and submitBin are the programs built for the tests: the shell conventions are
// tested on the real submit, signals and pipes included.
var workerBin, submitBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if os.Geteuid() != 0 {
			workerMissing = "root (the worker's namespace sandboxes)"
			if testenv.InCI() {
				fmt.Fprintln(os.Stderr, "missing in CI:", workerMissing)
				return 1
			}
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "runfleet-submit-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			bin *string
			pkg string
		}{{&workerBin, "cmd/worker"}, {&submitBin, "cmd/submit"}} {
			if *b.bin, err = testenv.BuildProgram(dir, b.pkg); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		bin := workerBin
		port := testenv.FreePortNumber()
		natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		w := exec.Command(bin, "--dev", "--nats-url", natsURL, "--listen", "127.0.0.1:0", "--concurrency", "2")
		// A test binary killed on its timeout runs no deferred stop: the worker must go with it.
		w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		log := &testenv.Buffer{}
		w.Stderr = log
		if err := w.Start(); err != nil {
			panic(err)
		}
		defer func() {
			_ = w.Process.Kill()
			_ = w.Wait()
		}()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(log.String(), `"worker started"`) {
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "worker did not start:\n%s", log.String())
				return 1
			}
			time.Sleep(50 * time.Millisecond)
		}
		return m.Run()
	}())
}

type call struct {
	code           int
	stdout, stderr string
}

func submit(t *testing.T, stdin string, args ...string) call {
	t.Helper()
	return submitEnv(t, nil, stdin, args...)
}

// submitEnv runs submit with env as its environment, beside RUNFLEET_NATS_URL.
func submitEnv(t *testing.T, env map[string]string, stdin string, args ...string) call {
	t.Helper()
	needWorker(t)
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "RUNFLEET_NATS_URL" {
			return natsURL
		}
		return env[k]
	}
	code := run(make(chan os.Signal), args, getenv, strings.NewReader(stdin), &out, &errb)
	return call{code, out.String(), errb.String()}
}

// TestPerJobFlagsReadNoEnvironment: a worker's RUNFLEET_ID, RUNFLEET_CODE or RUNFLEET_CONCURRENCY
// in submit's environment must not shape a job (docs/cli.md); the connection flags still read theirs.
func TestPerJobFlagsReadNoEnvironment(t *testing.T) {
	env := map[string]string{"RUNFLEET_ID": "worker-1", "RUNFLEET_CODE": "print('leaked')", "RUNFLEET_LANG": "nodejs",
		"RUNFLEET_TIMEOUT": "bogus", "RUNFLEET_CONCURRENCY": "0"}
	for i := range 2 {
		got := submitEnv(t, env, "", "--json", "--lang", "python3", "--code", "print('mine')")
		var st job.Settlement
		if err := json.Unmarshal([]byte(got.stdout), &st); err != nil || got.code != 0 {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, got.code, got.stdout, got.stderr)
		}
		if st.JobID == "worker-1" || st.Status != job.StatusSucceeded {
			t.Errorf("run %d: job %s settled %s, want a fresh id and succeeded", i, st.JobID, st.Status)
		}
	}
	if got := submitEnv(t, map[string]string{"RUNFLEET_QUEUE": "Bad Queue"}, "", "--lang", "python3", "--code", "print(1)"); got.code == 0 {
		t.Errorf("RUNFLEET_QUEUE was not read: exit %d", got.code)
	}
}

func TestExitCodesAndStreams(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hello.js")
	if err := os.WriteFile(script, []byte("console.log('from file'); console.error('to stderr')"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(data, []byte("file content"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []runCase{
		{name: "python prints", args: []string{"--lang", "python3", "--code", "print(6*7)"}, code: 0, stdout: "42\n"},
		{name: "node prints", args: []string{"--lang", "nodejs", "--code", "console.log(6*7)"}, code: 0, stdout: "42\n"},
		{name: "code from stdin exits 3", stdin: "import sys; sys.exit(3)", args: []string{"--lang", "python3", "-"}, code: 3},
		{name: "file with language guessed", args: []string{script}, code: 0, stdout: "from file\n", stderr: "to stderr\n"},
		{name: "stdin env and files", args: []string{"--lang", "python3", "--stdin", "in", "--env", "K=v", "--file", data + ":d/x.txt",
			"--code", "import os,sys; print(sys.stdin.read(), os.environ['K'], open('d/x.txt').read())"}, code: 0, stdout: "in v file content\n"},
		{name: "timeout is 124", args: []string{"--lang", "python3", "--timeout", "500ms", "--code", "import time; time.sleep(10)"},
			code: 124, stderr: "timed out"},
		{name: "rejected is 125", args: []string{"--lang", "cobol", "--code", "x"}, code: 125, stderr: "rejected: unknown_language"},
		{name: "limit over the maximum is 125", args: []string{"--lang", "python3", "--memory", "100g", "--code", "x"}, code: 125, stderr: "invalid_limits"},
		{name: "json settlement", args: []string{"--json", "--lang", "python3", "--code", "print(1)"}, code: 0, stdout: `"status": "succeeded"`},
		{name: "no code", args: []string{"--lang", "python3"}, code: exitUsage, stderr: "no code"},
		{name: "no language", args: []string{"--code", "x"}, code: exitUsage, stderr: "no language"},
		{name: "bad env flag", args: []string{"--lang", "python3", "--env", "novalue", "--code", "x"}, code: exitUsage, stderr: "want K=V"},
		{name: "bulk redrive without a status", args: []string{"redrive", "--since", "1h", "--dry-run"}, code: exitUsage, stderr: "needs --status"},
	}
	runCases(t, cases)
}

func TestNoWaitThenWatch(t *testing.T) {
	got := submit(t, "", "--no-wait", "--lang", "python3", "--code", "print('later')")
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 || id == "" {
		t.Fatalf("submit --no-wait = %d %q %q", got.code, got.stdout, got.stderr)
	}
	for range 2 { // a running or finished job, then the same again: replay is repeatable
		w := submit(t, "", "watch", id)
		if w.code != 0 || w.stdout != "later\n" {
			t.Errorf("watch %s = %d %q %q; want 0 %q", id, w.code, w.stdout, w.stderr, "later\n")
		}
	}
}

// TestEnsureStreams: submit makes no stream unless told to: on a prefix no fleet made, a submit
// fails and leaves nothing, and with --ensure-streams it makes the streams and stores the job.
func TestEnsureStreams(t *testing.T) {
	prefix := fmt.Sprintf("ensure%d", time.Now().UnixNano())
	args := []string{"--prefix", prefix, "--no-wait", "--lang", "python3", "--code", "print(1)"}
	if got := submit(t, "", args...); got.code == 0 {
		t.Errorf("submit without streams = %d %q, want a failure", got.code, got.stdout)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := job.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(t.Context(), s.JobsStream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after a plain submit: jobs stream lookup error = %v, want none made", err)
	}
	got := submit(t, "", append([]string{"--ensure-streams"}, args...)...)
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 || !job.ValidID(id) {
		t.Fatalf("submit --ensure-streams = %d %q %q", got.code, got.stdout, got.stderr)
	}
	st, err := js.Stream(t.Context(), s.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(t.Context(), s.Job(job.DefaultQueue, job.DefaultTenant, id)); err != nil {
		t.Errorf("job %s not stored: %v", id, err)
	}
}

func TestCancel(t *testing.T) {
	got := submit(t, "", "--no-wait", "--lang", "python3", "--code", "import time; print('up', flush=True); time.sleep(30)")
	id := strings.TrimSpace(got.stdout)
	if s := submit(t, "", "show", id); s.code != 125 || s.stdout != "" || !strings.Contains(s.stderr, "has not settled") {
		t.Errorf("show of a running job = %d %q %q, want 125 and a line saying it has not settled", s.code, s.stdout, s.stderr)
	}
	if c := submit(t, "", "cancel", id); c.code != 0 {
		t.Fatalf("cancel = %d %q", c.code, c.stderr)
	}
	w := submit(t, "", "watch", id)
	if w.code != 125 || !strings.Contains(w.stderr, "cancelled") {
		t.Errorf("watch after cancel = %d %q; want 125 and a line saying cancelled", w.code, w.stderr)
	}
}

func TestStatusLine(t *testing.T) {
	for _, tc := range []struct {
		counts map[job.Status]int
		want   string
	}{
		{map[job.Status]int{}, ""},
		{map[job.Status]int{job.StatusSucceeded: 30}, "succeeded 30"},
		{map[job.Status]int{job.StatusSucceeded: 28, job.StatusFailed: 1, job.StatusTimedOut: 1}, "failed 1, succeeded 28, timed_out 1"},
	} {
		if got := statusLine(tc.counts); got != tc.want {
			t.Errorf("statusLine(%v) = %q, want %q", tc.counts, got, tc.want)
		}
	}
}

// TestWorkers lists the worker behind the tests as a table, from its answer to the ping rather
// than after a heartbeat period.
func TestWorkers(t *testing.T) {
	start := time.Now()
	c := submit(t, "", "workers")
	if c.code != 0 {
		t.Fatalf("submit workers exit %d: %s", c.code, c.stderr)
	}
	lines := strings.Split(strings.TrimSpace(c.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one worker, got:\n%s", c.stdout)
	}
	head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	want := []string{"WORKER", "VERSION", "ARCH", "PROVIDER", "CGROUP", "SLOTS", "RUNNING", "WAITING", "PROFILES"}
	if strings.Join(head, " ") != strings.Join(want, " ") || len(row) != len(want) {
		t.Fatalf("table:\n%s", c.stdout)
	}
	// The worker keeps up to --warm (its 2 slots) sandboxes waiting for each of its profiles.
	most := 2 * len(profile.Builtin(testenv.RootFS(t), ""))
	if waiting, err := strconv.Atoi(row[7]); row[2] != runtime.GOARCH || row[3] != "namespace" || (row[4] != "v1" && row[4] != "v2") || row[5] != "2" ||
		err != nil || waiting < 0 || waiting > most {
		t.Errorf("row %q: want arch %s, provider namespace, cgroup v1|v2, 2 slots, 0 to %d waiting", row, runtime.GOARCH, most)
	}
	t.Logf("submit workers answered in %v", time.Since(start))
}

// runCase is one submit command line run against the test fleet, and what it must print.
type runCase struct {
	name           string
	stdin          string
	args           []string
	code           int
	stdout, stderr string // substrings
}

func runCases(t *testing.T, cases []runCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := submit(t, c.stdin, c.args...)
			if got.code != c.code || !strings.Contains(got.stdout, c.stdout) || !strings.Contains(got.stderr, c.stderr) {
				t.Errorf("submit %v = exit %d, stdout %q, stderr %q; want exit %d, stdout ∋ %q, stderr ∋ %q",
					c.args, got.code, got.stdout, got.stderr, c.code, c.stdout, c.stderr)
			}
		})
	}
}
