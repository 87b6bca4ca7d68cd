package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
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
		{name: "--stdin and --stdin-file", args: []string{"--stdin", "a", "--stdin-file", input, "--lang", "python3", "--code", "x"}, code: exitUsage, stderr: "not both"},
		{name: "--file keeps the mode", args: []string{"--file", tool + ":bin/tool", "--lang", "python3", "--code", "import os; print(oct(os.stat('bin/tool').st_mode & 0o777))"}, stdout: "0o750\n"},
		{name: "--preload shares the scope", args: []string{"--preload", "base = 40", "--lang", "python3", "--code", "print(base + 2)"}, stdout: "42\n"},
		{name: "--label reaches the settlement", args: []string{"--json", "--label", "team=ml", "--lang", "python3", "--code", "print(1)"}, stdout: `"team": "ml"`},
		{name: "--label without =", args: []string{"--label", "team", "--lang", "python3", "--code", "x"}, code: exitUsage, stderr: "want K=V"},
		{name: "--deadline passed", args: []string{"--deadline", "2000-01-01T00:00:00Z", "--lang", "python3", "--code", "print(1)"}, code: 125, stderr: "expired"},
		{name: "--deadline as a duration", args: []string{"--deadline", "10m", "--lang", "python3", "--code", "print(1)"}, stdout: "1\n"},
		{name: "--deadline bad", args: []string{"--deadline", "tomorrow", "--lang", "python3", "--code", "x"}, code: exitUsage, stderr: "--deadline"},
		{name: "two FILEs", args: []string{argvPy, argvJS}, code: exitUsage, stderr: "after --"},
		{name: "--timeout 0", args: []string{"--timeout", "0s", "--lang", "python3", "--code", "x"}, code: exitUsage, stderr: "positive"},
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
		{name: "unknown flag", args: []string{"--bogus"}, code: exitUsage, stderr: "flag provided but not defined: --bogus", lines: 1},
		{name: "bad value", args: []string{"bench", "--jobs", "x"}, code: exitUsage, stderr: "invalid value", lines: 1},
		{name: "version", args: []string{"--version"}, stdout: "submit dev"},
		{name: "help", args: []string{"--help"}, stdout: "usage: submit"},
		{name: "bench --jobs -1", args: []string{"bench", "--jobs", "-1"}, code: exitUsage, stderr: "--jobs -1: want at least 1", lines: 1},
		{name: "bench --jobs 0", args: []string{"bench", "--jobs", "0"}, code: exitUsage, stderr: "--jobs 0", lines: 1},
		{name: "bench --concurrency 0", args: []string{"bench", "--concurrency", "0"}, code: exitUsage, stderr: "--concurrency 0", lines: 1},
		{name: "watch without id", args: []string{"watch"}, code: exitUsage, stderr: "usage: submit watch ID", lines: 1},
		{name: "cancel bad id", args: []string{"cancel", "a.b"}, code: exitUsage, stderr: "not a valid job id", lines: 1},
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
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{ResultsMaxAge: time.Second}); err != nil {
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
	page := nats.NewMsg(s.Page("default", id))
	page.Data = []byte("gone\n")
	page.Header.Set(job.HeaderPage, "0")
	page.Header.Set(jetstream.MsgTTLHeader, "1s")
	if _, err := js.PublishMsg(ctx, page); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, s.Settled("default", id), []byte(`{"job_id":"output-expired","status":"failed","exit_code":3,"pages":1}`)); err != nil {
		t.Fatal(err)
	}
	results, err := js.Stream(ctx, s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the page's 1 s TTL", func() bool {
		_, err := results.GetLastMsgForSubject(ctx, s.Page("default", id))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	got := submitEnv(t, map[string]string{"RUNFLEET_PREFIX": "expiredout"}, "", "watch", id)
	if got.code != 3 || got.stdout != "" || !strings.Contains(got.stderr, "has expired") {
		t.Errorf("watch of a job whose output expired = exit %d, stdout %q, stderr %q; want 3 (its exit code), no output, a line saying it expired", got.code, got.stdout, got.stderr)
	}
}

// TestSizeFlags: --memory and --output-bytes read the size syntax of every program's size flags.
func TestSizeFlags(t *testing.T) {
	for _, tt := range []struct {
		memory, output string
		want           job.Limits
		err            string
	}{
		{memory: "256MiB", output: "64k", want: job.Limits{MemoryBytes: 256 << 20, OutputBytes: 64 << 10}},
		{memory: "1g", output: "1MiB", want: job.Limits{MemoryBytes: 1 << 30, OutputBytes: 1 << 20}},
		{memory: "268435456", want: job.Limits{MemoryBytes: 256 << 20}},
		{memory: "256MB", err: `--memory "256MB": want bytes, or a number with k, m, g`},
		{output: "0", err: "--output-bytes \"0\": want a positive size"},
	} {
		var l job.Limits
		err := limits(&options{memory: tt.memory, outputBytes: tt.output}, &l)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("--memory %q --output-bytes %q: error %v, want %q", tt.memory, tt.output, err, tt.err)
		case tt.err == "" && (err != nil || l != tt.want):
			t.Errorf("--memory %q --output-bytes %q = %+v, %v; want %+v", tt.memory, tt.output, l, err, tt.want)
		}
	}
}

// TestFlagsBeforeSubcommand: submit's flags may come before a subcommand's name as well as after
// it; without a name the line is submit's own, and a flag's value is never taken for a name.
func TestFlagsBeforeSubcommand(t *testing.T) {
	for _, tt := range []struct {
		args         []string
		name         string
		global, rest []string
	}{
		{args: []string{"--nats-url", "nats://x:4222", "workers"}, name: "workers", global: []string{"--nats-url", "nats://x:4222"}, rest: []string{}},
		{args: []string{"--prefix=p", "--json", "watch", "id"}, name: "watch", global: []string{"--prefix=p", "--json"}, rest: []string{"id"}},
		{args: []string{"-tenant", "t", "tenant", "show"}, name: "tenant", global: []string{"-tenant", "t"}, rest: []string{"show"}},
		{args: []string{"--code", "workers", "--lang", "python3"}},
		{args: []string{"--bogus", "workers"}},
		{args: []string{"script.py", "workers"}},
		{args: []string{"--", "workers"}},
	} {
		name, global, rest, ok := splitSubcommand(tt.args)
		if name != tt.name || ok != (tt.name != "") || !slices.Equal(global, tt.global) || !slices.Equal(rest, tt.rest) {
			t.Errorf("splitSubcommand(%q) = %q, %q, %q, %v; want %q, %q, %q", tt.args, name, global, rest, ok, tt.name, tt.global, tt.rest)
		}
	}
	needWorker(t)
	none := func(string) string { return "" } // no RUNFLEET_NATS_URL: the flag must reach the subcommand
	var out, errb bytes.Buffer
	if code := run(nil, []string{"--nats-url", natsURL, "workers", "--json"}, none, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), `"slots":2`) {
		t.Errorf("submit --nats-url URL workers --json = exit %d, stdout %q, stderr %q; want the worker", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(nil, []string{"--nats-url", natsURL, "--prefix", "nobody", "workers"}, none, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no worker answered") {
		t.Errorf("submit --nats-url URL --prefix nobody workers = exit %d, stderr %q; want 1, no worker answered", code, errb.String())
	}
}

// TestCompletion: `submit completion bash|zsh|fish` prints a script of the shell that completes
// subcommands and each one's own flags; bash's, run, completes them.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete -o default -F _submit submit", "zsh": "bashcompinit",
		"fish": "complete -c submit -n '__fish_seen_subcommand_from watch' -l json"} {
		var out, errb bytes.Buffer
		if code := run(nil, []string{"completion", shell}, func(string) string { return "" }, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("submit completion %s = exit %d, stderr %q; want a script with %q:\n%s", shell, code, errb.String(), want, out.String())
		}
	}
	var errb bytes.Buffer
	if code := run(nil, []string{"completion", "tcsh"}, func(string) string { return "" }, nil, io.Discard, &errb); code != exitUsage || !strings.Contains(errb.String(), "want bash, zsh or fish") {
		t.Errorf("submit completion tcsh = exit %d, stderr %q; want %d and one line", code, errb.String(), exitUsage)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	run(nil, []string{"completion", "bash"}, func(string) string { return "" }, nil, &script, io.Discard)
	for _, tt := range []struct{ line, want string }{
		{"submit wor", "workers"},
		{"submit --nats-u", "--nats-url"},
		{"submit watch --js", "--json"},
		{"submit tenant s", "set show"},
		{"submit tenant show --js", "--json"},
		{"submit jobs --sta", "--status"},
		{"submit completion f", "fish"},
	} {
		cmd := exec.Command(bash, "-c", script.String()+`
COMP_WORDS=($LINE); [[ $LINE == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _submit; echo "${COMPREPLY[*]}"`)
		cmd.Env = append(os.Environ(), "LINE="+tt.line)
		got, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(got)) != tt.want {
			t.Errorf("completing %q = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
}
