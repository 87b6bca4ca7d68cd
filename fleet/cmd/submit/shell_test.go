package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// proc is the built submit program running in a test.
type proc struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser // nil when the test gave a writer
	stderr *testenv.Buffer
	exited chan struct{}
	code   int
}

// start starts the built submit with args, its NATS the test fleet's unless env sets another,
// in dir (the test's own when ""), stdin empty, stdout a pipe the test reads.
func start(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return startTo(t, nil, dir, env, args...)
}

// startTo is start with stdout written to w, or a pipe when w is nil.
func startTo(t *testing.T, w io.Writer, dir string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(submitBin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "RUNFLEET_NATS_URL=" + natsURL}, env...)
	p := &proc{cmd: cmd, stderr: &testenv.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Stdout = w
	if w == nil {
		var err error
		if p.stdout, err = cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	go func() {
		defer close(p.exited)
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal()) // what a shell reports
		}
	}()
	return p
}

// wait waits for the program to exit and returns its exit code as a shell reports it.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(within):
		t.Fatalf("submit %q still running after %v; stderr %q", p.cmd.Args[1:], within, p.stderr.String())
		return 0
	}
}

// builtSubmit runs the built submit to its end.
func builtSubmit(t *testing.T, dir string, env []string, args ...string) call {
	t.Helper()
	var out testenv.Buffer
	p := startTo(t, &out, dir, env, args...)
	code := p.wait(t, 2*time.Minute)
	return call{code, out.String(), p.stderr.String()}
}

// settledAs is how job id settled, from submit watch.
func settledAs(t *testing.T, id string) job.Settlement {
	t.Helper()
	var st job.Settlement
	w := builtSubmit(t, "", nil, "watch", "--json", id)
	if err := json.Unmarshal([]byte(w.stdout), &st); err != nil {
		t.Fatalf("submit watch --json %s = exit %d, %q %q: %v", id, w.code, w.stdout, w.stderr, err)
	}
	return st
}

// jobID is the id submit printed in its cancel line.
func jobID(t *testing.T, stderr string) string {
	t.Helper()
	_, rest, ok := strings.Cut(stderr, "cancelling job ")
	if !ok {
		t.Fatalf("stderr %q names no job being cancelled", stderr)
	}
	return strings.Fields(rest)[0]
}

const longJob = "import time\nfor i in range(600):\n    print('up', i, flush=True)\n    time.sleep(0.1)"

// TestInterrupt: Ctrl-C, SIGTERM and SIGHUP cancel the job, wait for its settlement and exit 130,
// so that a shell loop stops.
func TestInterrupt(t *testing.T) {
	needWorker(t)
	cases := []struct {
		name    string
		signals []os.Signal
		stderr  []string
	}{
		{"ctrl-c", []os.Signal{os.Interrupt}, []string{"cancelling job", "cancelled"}},
		{"sigterm", []os.Signal{syscall.SIGTERM}, []string{"cancelling job", "cancelled"}},
		{"sighup", []os.Signal{syscall.SIGHUP}, []string{"cancelling job", "cancelled"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := start(t, "", nil, "--lang", "python3", "--code", longJob)
			line, err := bufio.NewReader(p.stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "up") {
				t.Fatalf("first line %q, %v; stderr %q", line, err, p.stderr.String())
			}
			go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
			for _, s := range c.signals {
				if err := p.cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			if code := p.wait(t, time.Minute); code != exitInterrupted {
				t.Errorf("exit = %d, want %d; stderr %q", code, exitInterrupted, p.stderr.String())
			}
			for _, want := range c.stderr {
				if !strings.Contains(p.stderr.String(), want) {
					t.Errorf("stderr = %q, want it to say %q", p.stderr.String(), want)
				}
			}
			if strings.Contains(p.stderr.String(), "running") {
				t.Errorf("stderr = %q says the job runs on, after a cancel", p.stderr.String())
			}
			if st := settledAs(t, jobID(t, p.stderr.String())); st.Status != job.StatusCancelled {
				t.Errorf("job settled %s, want cancelled", st.Status)
			}
		})
	}
}

// TestInterruptTwice: a second Ctrl-C stops waiting at once and says truthfully that the cancel
// stands; the cancel is stored. The job waits on a queue no worker serves, so that its
// settlement cannot come before the second Ctrl-C.
func TestInterruptTwice(t *testing.T) {
	c, control := controlStream(t)
	id := fmt.Sprintf("interrupted-twice-%d", time.Now().UnixNano())
	p := start(t, "", nil, "--id", id, "--queue", "nobody-serves", "--lang", "python3", "--code", "print(1)")
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	testenv.WaitFor(t, 30*time.Second, "the job stored", func() bool {
		_, err := c.Settlement(t.Context(), id)
		return errors.Is(err, runfleet.ErrNoSettlement)
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the cancel stored", func() bool {
		_, err := control.GetLastMsgForSubject(t.Context(), c.Subjects().Cancel("default", id))
		return err == nil
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// At once: well before the wait for the cancel's settlement would end.
	if code := p.wait(t, cancelWait-time.Second); code != exitInterrupted {
		t.Errorf("exit = %d, want %d; stderr %q", code, exitInterrupted, p.stderr.String())
	}
	for _, want := range []string{"cancelling job " + id, "stopped waiting for job " + id, "its cancel is stored and stands"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr = %q, want it to say %q", p.stderr.String(), want)
		}
	}
}

// TestOneSignalOnAnUnservedQueue: `timeout 8 submit --queue nobody …` sends one SIGTERM; submit
// cancels the job, which no worker settles, and stops waiting after cancelWait, exit 130, saying
// that the cancel stands.
func TestOneSignalOnAnUnservedQueue(t *testing.T) {
	c, _ := controlStream(t)
	id := fmt.Sprintf("one-signal-%d", time.Now().UnixNano())
	p := start(t, "", nil, "--id", id, "--queue", "nobody-serves", "--lang", "python3", "--code", "print(1)")
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	testenv.WaitFor(t, 30*time.Second, "the job stored", func() bool {
		_, err := c.Settlement(t.Context(), id)
		return errors.Is(err, runfleet.ErrNoSettlement)
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != exitInterrupted {
		t.Errorf("exit = %d, want %d; stderr %q", code, exitInterrupted, p.stderr.String())
	}
	for _, want := range []string{"cancelling job " + id, "has not settled " + cancelWait.String() + " after its cancel", "its cancel is stored and stands"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr = %q, want it to say %q", p.stderr.String(), want)
		}
	}
}

// TestWaitingStatusOnATerminal: a job that waits statusAfter with no output gets one line on a
// terminal's stderr saying where it waits; a pipe's stderr gets none (TestInterruptTwice).
func TestWaitingStatusOnATerminal(t *testing.T) {
	needWorker(t)
	tty := openTerminal(t)
	cmd := exec.Command(submitBin, "--queue", "nobody-serves", "--lang", "python3", "--code", "print(1)")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "RUNFLEET_NATS_URL=" + natsURL}
	cmd.Stderr = tty.slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	testenv.WaitFor(t, time.Minute, "the status line", func() bool {
		return strings.Contains(tty.out.String(), "has waited "+statusAfter.String()+" on queue nobody-serves and no worker has started it")
	})
	if n := strings.Count(tty.out.String(), "\n"); n != 1 {
		t.Errorf("stderr = %q, want one line", tty.out.String())
	}
}

// terminal is a pseudo-terminal: slave is a program's stderr, out what the program wrote.
type terminal struct {
	slave *os.File
	out   *testenv.Buffer
}

func openTerminal(t *testing.T) terminal {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tty := terminal{slave: slave, out: &testenv.Buffer{}}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(tty.out, master); close(copied) }()
	t.Cleanup(func() { slave.Close(); master.Close(); <-copied })
	return tty
}

// controlStream is a client of the test fleet and its control stream, where cancels are stored.
func controlStream(t *testing.T) (*runfleet.Client, jetstream.Stream) {
	t.Helper()
	needWorker(t)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := runfleet.NewClient(t.Context(), nc, runfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	control, err := js.Stream(t.Context(), c.Subjects().ControlStream())
	if err != nil {
		t.Fatal(err)
	}
	return c, control
}

// TestClosedStdout: submit long.py | head -1 cancels the job and exits 130, instead of dying of
// SIGPIPE with the job left running.
func TestClosedStdout(t *testing.T) {
	needWorker(t)
	p := start(t, "", nil, "--lang", "python3", "--code", longJob)
	line, err := bufio.NewReader(p.stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "up") {
		t.Fatalf("first line %q, %v; stderr %q", line, err, p.stderr.String())
	}
	p.stdout.Close() // what head does after its lines
	if code := p.wait(t, time.Minute); code != exitInterrupted {
		t.Errorf("exit = %d, want %d; stderr %q", code, exitInterrupted, p.stderr.String())
	}
	if st := settledAs(t, jobID(t, p.stderr.String())); st.Status != job.StatusCancelled {
		t.Errorf("job settled %s, want cancelled", st.Status)
	}
}

// TestSubcommandConventions: every subcommand answers --help with its own usage on stdout, flags
// spelled with two dashes; --version and errors as every program; flags after the ID; one line
// on any error; `workers` exits 1 when none answered; bench's default code fits --lang.
func TestSubcommandConventions(t *testing.T) {
	needWorker(t)
	for _, sub := range []string{"", "watch", "cancel", "artifacts", "workers", "bench", "tenant set", "tenant key add", "tenant show"} {
		t.Run("help "+cmpOr(sub, "submit"), func(t *testing.T) {
			t.Parallel()
			got := builtSubmit(t, "", nil, strings.Fields(sub+" --help")...)
			want := strings.TrimSpace("usage: submit " + sub)
			if got.code != 0 || !strings.HasPrefix(got.stdout, want) || !strings.Contains(got.stdout, "\n  --nats-url") ||
				strings.Contains(got.stdout, "\n  -nats-url") || got.stderr != "" {
				t.Errorf("submit %s --help = exit %d, stdout %q, stderr %q; want 0, %q and --flags on stdout", sub, got.code, got.stdout, got.stderr, want)
			}
		})
	}
	dead := []string{"RUNFLEET_NATS_URL=nats://127.0.0.1:1"}
	cases := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "artifacts --version", args: []string{"artifacts", "--version"}, stdout: "submit dev"},
		{name: "artifacts unknown flag", args: []string{"artifacts", "x", "--bogus"}, code: exitUsage, stderr: "--bogus"},
		{name: "artifacts bad environment", env: []string{"RUNFLEET_TENANT=Not A Tenant"}, args: []string{"artifacts", "x"}, code: 125, stderr: "tenant"},
		{name: "artifacts flags after ID", env: dead, args: []string{"artifacts", "some-id", "--prefix", "p"}, code: 125, stderr: "unreachable"},
		{name: "cancel --json", env: dead, args: []string{"cancel", "x", "--json"}, code: exitUsage, stderr: "--json"},
		{name: "unknown flag", env: dead, args: []string{"--bogus"}, code: exitUsage, stderr: "--bogus"},
		{name: "--json and --events", env: dead, args: []string{"--json", "--events", "--lang", "python3", "--code", "x"}, code: exitUsage, stderr: "not both"},
		{name: "workers none answer", args: []string{"workers", "--prefix", "nobody"}, code: 1, stderr: "no worker answered"},
		{name: "workers --json", args: []string{"workers", "--json"}, stdout: `"slots":2`},
		{name: "bench nodejs", args: []string{"bench", "--jobs", "2", "--lang", "nodejs"}, stdout: "statuses succeeded 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := builtSubmit(t, "", c.env, c.args...)
			if got.code != c.code || !strings.Contains(got.stdout, c.stdout) || !strings.Contains(got.stderr, c.stderr) {
				t.Errorf("submit %q = exit %d, stdout %q, stderr %q; want %d, stdout ∋ %q, stderr ∋ %q", c.args, got.code, got.stdout, got.stderr, c.code, c.stdout, c.stderr)
			}
			if c.code != 0 && strings.Count(got.stderr, "\n") != 1 {
				t.Errorf("submit %q wrote %d lines to stderr, want one: %q", c.args, strings.Count(got.stderr, "\n"), got.stderr)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestEvents: --events is NDJSON, a line per page (stdout and stderr, text or base64) and the
// settlement last, so that a script gets both the output and how the job ended.
func TestEvents(t *testing.T) {
	needWorker(t)
	code := "import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\nsys.stdout.buffer.write(b'\\xff\\xfe'); sys.stdout.flush()\nsys.exit(3)"
	got := builtSubmit(t, "", nil, "--events", "--lang", "python3", "--code", code)
	if got.code != 3 {
		t.Errorf("exit = %d, want 3; stderr %q", got.code, got.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n")
	var data = map[string]string{}
	for i, l := range lines {
		var ev struct {
			Type, Stream, Data, Encoding string
			Index                        *int64
			Settlement                   *job.Settlement
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		switch {
		case ev.Type == "page" && i < len(lines)-1 && ev.Index != nil:
			b := []byte(ev.Data)
			if ev.Encoding == "base64" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(ev.Data); err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
			}
			data[ev.Stream] += string(b)
		case ev.Type == "settlement" && i == len(lines)-1 && ev.Settlement != nil:
			if ev.Settlement.Status != job.StatusFailed || ev.Settlement.ExitCode == nil || *ev.Settlement.ExitCode != 3 {
				t.Errorf("settlement %+v, want failed with exit 3", ev.Settlement)
			}
		default:
			t.Errorf("line %d of %d: %q", i, len(lines), l)
		}
	}
	if data["stdout"] != "out\n\xff\xfe" || data["stderr"] != "err\n" {
		t.Errorf("pages = %q, want stdout %q and stderr %q", data, "out\n\xff\xfe", "err\n")
	}
}

// TestLostConnection: a submit that waits says on stderr when the fleet's NATS goes away, and
// that it retries.
func TestLostConnection(t *testing.T) {
	needWorker(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePortNumber())
	w := exec.Command(workerBin, "--dev", "--nats-url", url, "--listen", "127.0.0.1:0", "--concurrency", "1", "--warm", "0", "--grace", "1s")
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log := &testenv.Buffer{}
	w.Stderr = log
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = w.Wait()
	}()
	t.Cleanup(func() {
		_ = w.Process.Kill()
		<-exited
	})
	testenv.WaitFor(t, time.Minute, "the second worker", func() bool { return strings.Contains(log.String(), `"worker started"`) })
	// A queue no worker serves: the job waits, and so does submit.
	id := job.NewID()
	p := start(t, "", []string{"RUNFLEET_NATS_URL=" + url}, "--id", id, "--queue", "nobody-serves", "--lang", "python3", "--code", "print(1)")
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subjects, err := job.NewSubjects(job.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// A watch subscribes to the job's republished results: a request there finds a responder
	// (that never answers) once it does, and none before.
	testenv.WaitFor(t, 30*time.Second, "submit's watch of the job", func() bool {
		_, err := nc.Request(subjects.WatchPage("default", id), nil, 100*time.Millisecond)
		return errors.Is(err, nats.ErrTimeout)
	})
	nc.Close()
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the second worker did not stop")
	}
	testenv.WaitFor(t, 30*time.Second, "submit saying the connection is lost", func() bool {
		return strings.Contains(p.stderr.String(), "lost the connection to NATS") && strings.Contains(p.stderr.String(), "retrying")
	})
	select {
	case <-p.exited:
		t.Errorf("submit exited %d, want it waiting; stderr %q", p.code, p.stderr.String())
	default:
	}
}

// TestOutputConfined: a hostile job's --output '**' writes only inside ./<job id>/ in the user's
// directory: the user's own files (a .git/config among them) are untouched, a .git path is refused,
// names with terminal escapes and bytes that are not UTF-8 are printed quoted, and downloading
// again never replaces a file unless --force.
func TestOutputConfined(t *testing.T) {
	needWorker(t)
	home := t.TempDir()
	mine := map[string]string{"notes.txt": "my notes", ".git/config": "[core]\n", "x": "mine"}
	for p, body := range mine {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostile := `import os
os.makedirs('.git', exist_ok=True)
open('.git/config', 'w').write('[core]\n\tfsmonitor = touch /tmp/owned\n')
open('notes.txt', 'w').write('from the job')
for p in ('../x', '/workspace/../x'):
    try:
        open(p, 'w').write('escaped')
    except OSError:
        pass
open('\x1b[2K\rsubmit: job succeeded\x07', 'w').write('escape')
open(b'caf\xe9.txt', 'w').write('latin-1')
print('done')`
	checkMine := func() {
		t.Helper()
		for p, body := range mine {
			if b, err := os.ReadFile(filepath.Join(home, p)); err != nil || string(b) != body {
				t.Errorf("the user's %s = %q, %v; want %q untouched", p, b, err, body)
			}
		}
		err := filepath.WalkDir(home, func(p string, d os.DirEntry, err error) error {
			rel, _ := filepath.Rel(home, p)
			top := strings.Split(rel, string(filepath.Separator))[0]
			if _, ok := mine[rel]; ok || d.IsDir() || top == ".git" || job.ValidID(top) {
				return err
			}
			return errors.New(rel + " written outside the job's directory")
		})
		if err != nil {
			t.Error(err)
		}
	}
	got := builtSubmit(t, home, nil, "--output", "**", "--lang", "python3", "--code", hostile)
	if got.code != exitOther || got.stdout != "done\n" {
		t.Fatalf("hostile job = exit %d, stdout %q, stderr %q; want 125 (.git refused), done", got.code, got.stdout, got.stderr)
	}
	var saved, errs []string
	for _, l := range strings.SplitAfter(strings.TrimSuffix(got.stderr, "\n"), "\n") {
		if strings.HasPrefix(l, "submit: saved ") {
			saved = append(saved, l)
		} else {
			errs = append(errs, l)
		}
	}
	// The name that is not UTF-8 may fail to download (issue 22, item 6): then the one error line
	// names the .git path first and counts it.
	if len(errs) != 1 || !strings.Contains(errs[0], `".git/config": unsafe artifact path`) {
		t.Errorf("error lines %q, want one refusing \".git/config\"", errs)
	}
	if strings.ContainsAny(got.stderr, "\x1b\r\x07") || !utf8.ValidString(got.stderr) || !strings.Contains(got.stderr, `\x1b[2K\rsubmit: job succeeded\a"`) {
		t.Errorf("stderr %q: want every name quoted, no raw escape or invalid UTF-8", got.stderr)
	}
	checkMine()
	_, rest, _ := strings.Cut(got.stderr, `saved "`)
	id, _, _ := strings.Cut(rest, "/")
	if b, err := os.ReadFile(filepath.Join(home, id, "notes.txt")); err != nil || string(b) != "from the job" {
		t.Errorf("%s/notes.txt = %q, %v; want the job's; saved %q", id, b, err, saved)
	}
	if _, err := os.Stat(filepath.Join(home, id, ".git")); err == nil {
		t.Errorf("%s/.git written", id)
	}

	// Again into the same directory: refused in one line, then replaced with --force.
	again := builtSubmit(t, home, nil, "artifacts", id)
	if again.code != exitOther || strings.Count(again.stderr, "\n") != 1 || !strings.Contains(again.stderr, "--force") {
		t.Errorf("submit artifacts into a full directory = exit %d, stderr %q; want 125, one line naming --force", again.code, again.stderr)
	}
	// --force replaces them; .git is still refused.
	if force := builtSubmit(t, home, nil, "artifacts", id, "--force"); force.code != exitOther || !strings.Contains(force.stderr, `saved "`+id+`/notes.txt"`) {
		t.Errorf("submit artifacts --force = exit %d, stderr %q; want notes.txt saved, 125 for .git", force.code, force.stderr)
	}
	checkMine()
}
