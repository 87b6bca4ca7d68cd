package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestJobInputs: flags anywhere on the line, program arguments after --, piped stdin, the mode
// of --file, --stdin-file, --preload, --label and --deadline, each tried as a user types them.
func TestJobInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	argvPy := write("argv.py", "import sys; print(sys.argv[1:])", 0o644)
	argvJS := write("argv.js", "console.log(JSON.stringify(process.argv.slice(2)))", 0o644)
	tool := write("tool.sh", "#!/bin/sh\necho hi\n", 0o750)
	input := write("input.txt", "from a file", 0o644)
	cases := []runCase{
		{name: "flags after FILE", args: []string{argvPy, "--timeout", "5s", "--lang", "python3"}, stdout: "[]\n"},
		{name: "python arguments after --", args: []string{argvPy, "--timeout", "5s", "--", "--month", "11", "-v"}, stdout: "['--month', '11', '-v']\n"},
		{name: "node arguments after --", args: []string{"--pids", "32", argvJS, "--", "a b", "c"}, stdout: `["a b","c"]` + "\n"},
		{name: "piped stdin is the job's", stdin: "piped", args: []string{"--lang", "python3", "--code", "import sys; print(sys.stdin.read().upper())"}, stdout: "PIPED\n"},
		{name: "--stdin wins over the pipe", stdin: "piped", args: []string{"--stdin", "flag", "--lang", "python3", "--code", "import sys; print(sys.stdin.read())"}, stdout: "flag\n"},
		{name: "--stdin-file", args: []string{"--stdin-file", input, "--lang", "python3", "--code", "import sys; print(sys.stdin.read())"}, stdout: "from a file\n"},
		{name: "--stdin and --stdin-file", args: []string{"--stdin", "a", "--stdin-file", input, "--lang", "python3", "--code", "x"}, code: 125, stderr: "not both"},
		{name: "--file keeps the mode", args: []string{"--file", tool + ":bin/tool", "--lang", "python3", "--code", "import os; print(oct(os.stat('bin/tool').st_mode & 0o777))"}, stdout: "0o750\n"},
		{name: "--preload shares the scope", args: []string{"--preload", "base = 40", "--lang", "python3", "--code", "print(base + 2)"}, stdout: "42\n"},
		{name: "--label reaches the settlement", args: []string{"--json", "--label", "team=ml", "--lang", "python3", "--code", "print(1)"}, stdout: `"team": "ml"`},
		{name: "--label without =", args: []string{"--label", "team", "--lang", "python3", "--code", "x"}, code: 125, stderr: "want K=V"},
		{name: "--deadline passed", args: []string{"--deadline", "2000-01-01T00:00:00Z", "--lang", "python3", "--code", "print(1)"}, code: 125, stderr: "expired"},
		{name: "--deadline as a duration", args: []string{"--deadline", "10m", "--lang", "python3", "--code", "print(1)"}, stdout: "1\n"},
		{name: "--deadline bad", args: []string{"--deadline", "tomorrow", "--lang", "python3", "--code", "x"}, code: 125, stderr: "--deadline"},
		{name: "two FILEs", args: []string{argvPy, argvJS}, code: 125, stderr: "after --"},
		{name: "--timeout 0", args: []string{"--timeout", "0s", "--lang", "python3", "--code", "x"}, code: 125, stderr: "positive"},
	}
	runCases(t, cases)
}

// TestCommandLineErrorsAreOneLine: a bad flag prints one line with the hint, not the usage;
// --version and --help exit 0; nothing connects (the NATS address here refuses connections).
func TestCommandLineErrorsAreOneLine(t *testing.T) {
	dead := map[string]string{"RUNFLEET_NATS_URL": "nats://127.0.0.1:1"}
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string // the whole of it, when want lines > 0
		lines  int
	}{
		{name: "unknown flag", args: []string{"--bogus"}, code: 125, stderr: "flag provided but not defined: --bogus", lines: 1},
		{name: "bad value", args: []string{"bench", "--jobs", "x"}, code: 125, stderr: "invalid value", lines: 1},
		{name: "version", args: []string{"--version"}, stdout: "submit dev"},
		{name: "help", args: []string{"--help"}, stdout: "usage: submit"},
		{name: "bench --jobs -1", args: []string{"bench", "--jobs", "-1"}, code: 125, stderr: "--jobs -1: want at least 1", lines: 1},
		{name: "bench --jobs 0", args: []string{"bench", "--jobs", "0"}, code: 125, stderr: "--jobs 0", lines: 1},
		{name: "bench --concurrency 0", args: []string{"bench", "--concurrency", "0"}, code: 125, stderr: "--concurrency 0", lines: 1},
		{name: "watch without id", args: []string{"watch"}, code: 125, stderr: "usage: submit watch ID", lines: 1},
		{name: "cancel bad id", args: []string{"cancel", "a.b"}, code: 125, stderr: "not a valid job id", lines: 1},
		{name: "missing creds file", args: []string{"--nats-creds", "/nonexistent/user.creds", "--lang", "python3", "--code", "x"}, code: 125, stderr: "--nats-creds", lines: 1},
		{name: "missing CA file", args: []string{"watch", "x", "--nats-tls-ca", "/nonexistent/ca.pem"}, code: 125, stderr: "--nats-tls-ca", lines: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := submitEnv(t, dead, "", c.args...)
			if got.code != c.code || !strings.Contains(got.stdout, c.stdout) || !strings.Contains(got.stderr, c.stderr) {
				t.Errorf("submit %v = exit %d, stdout %q, stderr %q; want exit %d, stdout ∋ %q, stderr ∋ %q", c.args, got.code, got.stdout, got.stderr, c.code, c.stdout, c.stderr)
			}
			if n := strings.Count(got.stderr, "\n"); c.lines > 0 && n != c.lines {
				t.Errorf("submit %v wrote %d lines to stderr, want %d:\n%s", c.args, n, c.lines, got.stderr)
			}
			if strings.Contains(got.stderr, "unreachable") {
				t.Errorf("submit %v tried to connect: %s", c.args, got.stderr)
			}
		})
	}
}

// TestCancelOfUnknownOrSettledJob: both fail with one line and exit non-zero, and a cancel of an
// unknown id leaves nothing behind: a job submitted later with that id runs.
func TestCancelOfUnknownOrSettledJob(t *testing.T) {
	const id = "typo-then-used"
	c := submit(t, "", "cancel", id)
	if c.code == 0 || !strings.Contains(c.stderr, "no job "+id) || strings.Count(c.stderr, "\n") != 1 {
		t.Errorf("cancel of an unknown id = exit %d, stderr %q; want non-zero and one line saying no job", c.code, c.stderr)
	}
	r := submit(t, "", "--id", id, "--lang", "python3", "--code", "print('ran')")
	if r.code != 0 || r.stdout != "ran\n" {
		t.Errorf("job %s after a cancel of the unknown id = exit %d, %q %q; want it to run", id, r.code, r.stdout, r.stderr)
	}
	c = submit(t, "", "cancel", id)
	if c.code == 0 || !strings.Contains(c.stderr, "already settled") {
		t.Errorf("cancel of a settled job = exit %d, stderr %q; want non-zero, already settled", c.code, c.stderr)
	}
	if w := submit(t, "", "watch", "never-submitted"); w.code == 0 || !strings.Contains(w.stderr, "no job never-submitted") {
		t.Errorf("watch of an unknown id = exit %d, stderr %q; want non-zero at once, no job", w.code, w.stderr)
	}
}

// TestWatchDetaches: Ctrl-C in submit watch stops watching (exit 130) and leaves the job running.
func TestWatchDetaches(t *testing.T) {
	got := submit(t, "", "--no-wait", "--lang", "python3", "--code", "import time; print('up', flush=True); time.sleep(60)")
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 {
		t.Fatalf("submit --no-wait = %d %q", got.code, got.stderr)
	}
	sigs := make(chan os.Signal, 1)
	var out, errb testenv.Buffer
	done := make(chan int, 1)
	go func() { done <- run(sigs, []string{"watch", id}, natsEnv, strings.NewReader(""), &out, &errb) }()
	testenv.WaitFor(t, 30*time.Second, "the job's first output", func() bool { return strings.Contains(out.String(), "up") })
	sigs <- os.Interrupt
	select {
	case code := <-done:
		if code != exitInterrupted {
			t.Errorf("watch exit = %d after Ctrl-C, want %d; stderr %q", code, exitInterrupted, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not return after Ctrl-C")
	}
	st := submit(t, "", "cancel", id) // succeeds only while the job has not settled
	if st.code != 0 {
		t.Errorf("cancel after the watch detached = exit %d, %q; want the job still running", st.code, st.stderr)
	}
}

// TestBenchReportsFailures: statuses as one line, and exit 1 when jobs did not succeed.
func TestBenchReportsFailures(t *testing.T) {
	got := submit(t, "", "bench", "--jobs", "3", "--concurrency", "2", "--code", "import sys; sys.exit(1)")
	if got.code != 1 || !strings.Contains(got.stdout, "statuses failed 3\n") || !strings.Contains(got.stderr, "3 of 3 jobs did not succeed") {
		t.Errorf("bench of failing jobs = exit %d, stdout %q, stderr %q; want 1, statuses failed 3", got.code, got.stdout, got.stderr)
	}
	ok := submit(t, "", "bench", "--jobs", "2")
	if ok.code != 0 || !strings.Contains(ok.stdout, "statuses succeeded 2\n") {
		t.Errorf("bench = exit %d, stdout %q, stderr %q", ok.code, ok.stdout, ok.stderr)
	}
}

func natsEnv(k string) string {
	if k == "RUNFLEET_NATS_URL" {
		return natsURL
	}
	return ""
}

// TestWatchExpiredOutput: a job whose pages expired is no failure to watch: one line says the
// output expired, the settlement (kept for the job's record) follows, and the exit code is the
// job's.
func TestWatchExpiredOutput(t *testing.T) {
	needWorker(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the streams' deletion below: cleanups run last first
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("expiredout")
	ctx := t.Context()
	if err := runfleet.EnsureStreams(ctx, js, s, runfleet.StreamOptions{ResultsMaxAge: time.Second}); err != nil {
		t.Fatal(err)
	}
	// The server reserves each stream's bounds: this prefix's must not stay in the other tests' way.
	t.Cleanup(func() {
		for _, name := range []string{s.JobsStream(), s.ResultsStream(), s.ControlStream()} {
			_ = js.DeleteStream(context.Background(), name)
		}
		_ = js.DeleteObjectStore(context.Background(), s.ArtifactsBucket())
	})
	const id = "output-expired"
	page := nats.NewMsg(s.Page(id))
	page.Data = []byte("gone\n")
	page.Header.Set(job.HeaderPage, "0")
	page.Header.Set(jetstream.MsgTTLHeader, "1s")
	if _, err := js.PublishMsg(ctx, page); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, s.Settled(id), []byte(`{"job_id":"output-expired","status":"failed","exit_code":3,"pages":1}`)); err != nil {
		t.Fatal(err)
	}
	results, err := js.Stream(ctx, s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the page's 1 s TTL", func() bool {
		_, err := results.GetLastMsgForSubject(ctx, s.Page(id))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	got := submitEnv(t, map[string]string{"RUNFLEET_PREFIX": "expiredout"}, "", "watch", id)
	if got.code != 3 || got.stdout != "" || !strings.Contains(got.stderr, "has expired") {
		t.Errorf("watch of a job whose output expired = exit %d, stdout %q, stderr %q; want 3 (its exit code), no output, a line saying it expired", got.code, got.stdout, got.stderr)
	}
}
