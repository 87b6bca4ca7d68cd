package providertest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// envChild names the job a test binary re-executed as a child worker runs.
const envChild = "RUNFLEET_PROVIDERTEST_CHILD"

// Child jobs.
const (
	childBusy = "busy" // one sandbox running a busy loop, until the child is killed
	// childStdinUnread is childBusy with a program that never reads the 512 KiB of stdin its job
	// brings: the pipe fills, and whatever relays stdin must still see its worker die.
	childStdinUnread = "stdin-unread"
	childUIDs        = "uids" // ChildJobs sandboxes, ChildParallel at once, each reporting its uid
	childExe         = "exe"  // one sandbox reporting what it sees of the child's own executable
	childFDs         = "fds"  // one sandbox reporting the descriptors its program holds
	// ChildSleepers runs one sandbox whose program forks ChildSleeperCount sleepers, prints
	// "uid UID" and sleeps, until the child is killed.
	ChildSleepers = "sleepers"
)

// ChildSleeperCount is how many processes the program of a ChildSleepers job forks.
const ChildSleeperCount = 20

// fdsCode prints the descriptors the program holds (the listing's own is gone when it prints),
// and what it reads from descriptor 7.
const fdsCode = "import os\nfds = []\nfor f in os.listdir('/proc/self/fd'):\n    try:\n" +
	"        os.readlink('/proc/self/fd/' + f); fds.append(int(f))\n    except OSError:\n        pass\n" +
	"print('fds', sorted(fds))\ntry:\n    print('fd7', os.read(7, 64))\nexcept OSError:\n    print('fd7 closed')"

// ChildJobs and ChildParallel shape the "uids" child job.
const (
	ChildJobs     = 8
	ChildParallel = 4
)

// ChildMain turns a test binary started by [StartChild] into a tiny worker: a real process of its
// own that makes sandboxes with the provider open returns, so that a test can kill it or run two
// at once. A package's TestMain calls it first; it returns at once in the test binary itself.
func ChildMain(open func(ctx context.Context) (Env, func(), error)) {
	kind := os.Getenv(envChild)
	if kind == "" {
		return
	}
	ctx := context.Background()
	e, closeEnv, err := open(ctx)
	if err == nil {
		err = runChild(ctx, kind, e)
		closeEnv()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runWithStdin runs code in sb with stdin after the payload, then destroys sb.
func runWithStdin(ctx context.Context, sb sandbox.Sandbox, code, stdin string, stdout io.Writer) error {
	defer sb.Destroy(context.WithoutCancel(ctx))
	payload, err := profile.Payload(job.Request{Language: "python3", Code: code, Stdin: stdin})
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	exit, err := sb.Run(ctx, bytes.NewReader(payload), stdout, &errb)
	if err == nil && exit.Code != 0 {
		err = fmt.Errorf("exit %d: %s", exit.Code, errb.String())
	}
	return err
}

func runChild(ctx context.Context, kind string, e Env) error {
	var out sync.Mutex // one line at a time on stdout
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	create := func() (sandbox.Sandbox, error) {
		sb, err := e.Provider.Create(ctx, Shape(e.Profiles["python3"]))
		if err != nil {
			return nil, err
		}
		j := Job("child")
		j.Limits.Timeout = time.Minute
		if err := sb.Assign(ctx, j); err != nil {
			return nil, errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
		}
		return sb, nil
	}
	runIn := func(sb sandbox.Sandbox, code string, stdout io.Writer) error {
		return runWithStdin(ctx, sb, code, "", stdout)
	}
	switch kind {
	case childBusy, childStdinUnread:
		// A sandbox made ahead and never assigned, as a pool keeps, beside one running a job.
		waiting, err := e.Provider.Create(ctx, Shape(e.Profiles["python3"]))
		if err != nil {
			return err
		}
		defer waiting.Destroy(context.WithoutCancel(ctx))
		say("waiting %s", waiting.ID())
		sb, err := create()
		if err != nil {
			return err
		}
		say("sandbox %s", sb.ID())
		var stdin string
		if kind == childStdinUnread {
			stdin = strings.Repeat("x", 512<<10)
		}
		return runWithStdin(ctx, sb, "print('started', flush=True)\nwhile True: pass", stdin, os.Stdout)
	case childFDs:
		sb, err := create()
		if err != nil {
			return err
		}
		return runIn(sb, fdsCode, os.Stdout)
	case ChildSleepers:
		sb, err := create()
		if err != nil {
			return err
		}
		code := fmt.Sprintf("import os, time\nfor _ in range(%d):\n    if os.fork() == 0:\n        time.sleep(600); os._exit(0)\n"+
			"print('uid', os.getuid(), flush=True)\ntime.sleep(600)", ChildSleeperCount)
		return runIn(sb, code, os.Stdout)
	case childExe:
		exe, err := os.Readlink("/proc/self/exe")
		if err != nil {
			return err
		}
		say("exe %s", exe)
		sb, err := create()
		if err != nil {
			return err
		}
		return runIn(sb, seesCode(exe), os.Stdout)
	case childUIDs:
		// Rounds of ChildParallel sandboxes made at once; the parent starts a round's programs
		// once every child worker made its sandboxes, so that they all hold a uid together.
		stdin := bufio.NewScanner(os.Stdin)
		for range ChildJobs / ChildParallel {
			sbs := make([]sandbox.Sandbox, 0, ChildParallel)
			for range ChildParallel {
				sb, err := create()
				if err != nil {
					return err
				}
				sbs = append(sbs, sb)
			}
			say("ready")
			if !stdin.Scan() {
				return fmt.Errorf("no go from the parent")
			}
			errs := make(chan error, len(sbs))
			var wg sync.WaitGroup
			for _, sb := range sbs {
				wg.Go(func() {
					var b bytes.Buffer
					err := runIn(sb, "import os, time\nprint(os.getuid(), time.time_ns())\ntime.sleep(0.1)\nprint(time.time_ns())", &b)
					if err == nil {
						say("uid %s", strings.Join(strings.Fields(b.String()), " "))
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	return fmt.Errorf("unknown child job %q", kind)
}

// Child is a running child worker.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error
}

// StartChild re-executes the test binary as a child worker running job kind, with env added to
// its environment. The test's cleanup kills it if it still runs.
func StartChild(t *testing.T, kind string, env ...string) *Child {
	t.Helper()
	return startChild(t, kind, nil, env...)
}

// startChild is StartChild with files passed as descriptors 3, 4, ... (nil: closed).
func startChild(t *testing.T, kind string, files []*os.File, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.ExtraFiles = files
	cmd.Env = append(append(os.Environ(), envChild+"="+kind), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child worker: %v", err)
	}
	c := &Child{cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		if err := cmd.Wait(); err != nil {
			c.err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// Line waits for the child's next line of output; "" when it ended.
func (c *Child) Line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			<-c.done
			t.Fatalf("child worker ended: %v", c.err)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no output from the child worker in 30s")
	}
	return ""
}

// Kill SIGKILLs the child and waits for it to end.
func (c *Child) Kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
}

// Wait waits for the child to exit and returns its error.
func (c *Child) Wait() error {
	for range c.lines {
	}
	<-c.done
	return c.err
}

// Lines drains the child's output to its end, then returns it with the child's error.
func (c *Child) Lines() ([]string, error) {
	var out []string
	for l := range c.lines {
		out = append(out, l)
	}
	<-c.done
	return out, c.err
}

// seesCode prints what a program sees of the host file path: "sees nothing" unless it can read
// some of its bytes, and what /usr/local holds.
func seesCode(path string) string {
	return fmt.Sprintf("import os\ntry:\n    seen = len(open(%q, 'rb').read(64))\nexcept OSError:\n    seen = 0\n"+
		"print('sees', 'bytes' if seen else 'nothing')\nprint('usr/local', sorted(os.listdir('/usr/local')) if os.path.isdir('/usr/local') else [])", path)
}

// RunExeInvisible runs the test binary copied to path as a child worker, and checks that its
// sandbox cannot read that executable nor list anything under /usr/local.
func RunExeInvisible(t *testing.T, path string, env ...string) {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, self, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	c := &Child{}
	func() {
		old := os.Args[0]
		os.Args[0] = path
		defer func() { os.Args[0] = old }()
		c = StartChild(t, childExe, env...)
	}()
	lines, err := c.Lines()
	if err != nil {
		t.Fatalf("child worker: %v", err)
	}
	want := []string{"exe " + path, "sees nothing", "usr/local []"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("child worker at %s printed %q, want %q", path, lines, want)
	}
}

// OrphanGrace is how long a sandbox may outlive its SIGKILLed worker (G5).
const OrphanGrace = 2 * time.Second

// RunKilledWorker SIGKILLs a child worker whose sandbox runs a busy loop, once the loop has
// started, beside a sandbox it made ahead and never used, and checks that alive reports nothing
// of either running within OrphanGrace: once with no stdin past the payload, once with a program
// that leaves 512 KiB of stdin unread in a full pipe.
func RunKilledWorker(t *testing.T, alive func(t *testing.T, sandboxID string) string, env ...string) {
	for _, kind := range []string{childBusy, childStdinUnread} {
		t.Run(kind, func(t *testing.T) { runKilledWorker(t, kind, alive, env...) })
	}
}

func runKilledWorker(t *testing.T, kind string, alive func(t *testing.T, sandboxID string) string, env ...string) {
	c := StartChild(t, kind, env...)
	waiting, ok := strings.CutPrefix(c.Line(t), "waiting ")
	if !ok {
		t.Fatalf("child worker did not name its waiting sandbox")
	}
	id, ok := strings.CutPrefix(c.Line(t), "sandbox ")
	if !ok {
		t.Fatalf("child worker did not name its sandbox")
	}
	if l := c.Line(t); l != "started" {
		t.Fatalf("child worker printed %q, want started", l)
	}
	for _, sb := range []string{waiting, id} {
		if left := alive(t, sb); left == "" {
			t.Fatalf("alive(%s) reports nothing while the sandbox lives: the check cannot fail", sb)
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = c.Wait()
	var left string
	for {
		if left = alive(t, id) + alive(t, waiting); left == "" || time.Since(killed) > OrphanGrace {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if left != "" {
		t.Errorf("%v after its worker was SIGKILLed, sandboxes %s (running) or %s (waiting) still run: %s", OrphanGrace, id, waiting, left)
	} else {
		t.Logf("running and waiting sandboxes gone %v after their worker's SIGKILL", time.Since(killed).Round(time.Millisecond))
	}
}

// UIDInterval is when one sandboxed program ran under a uid, as the program itself saw it.
type UIDInterval struct {
	UID        int
	Start, End int64 // unix nanoseconds
	Worker     int
	Round      int // programs of one round ran together, their sandboxes all made before any started
}

// RunUIDWorkers runs two child workers at once, each making rounds of ChildParallel sandboxes,
// ChildJobs in all; a round starts once both workers made their sandboxes. It returns the uid
// intervals the programs reported.
func RunUIDWorkers(t *testing.T, env ...string) []UIDInterval {
	children := []*Child{StartChild(t, childUIDs, env...), StartChild(t, childUIDs, env...)}
	var out []UIDInterval
	for round := range ChildJobs / ChildParallel {
		for w, c := range children {
			if l := c.Line(t); l != "ready" {
				t.Fatalf("child worker %d printed %q, want ready", w, l)
			}
		}
		for _, c := range children {
			if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
		for w, c := range children {
			for range ChildParallel {
				f := strings.Fields(c.Line(t))
				if len(f) != 4 || f[0] != "uid" {
					t.Fatalf("child worker %d printed %q, want uid UID START END", w, f)
				}
				uid, _ := strconv.Atoi(f[1])
				start, _ := strconv.ParseInt(f[2], 10, 64)
				end, _ := strconv.ParseInt(f[3], 10, 64)
				out = append(out, UIDInterval{UID: uid, Start: start, End: end, Worker: w, Round: round})
			}
		}
	}
	for w, c := range children {
		if err := c.Wait(); err != nil {
			t.Fatalf("child worker %d: %v", w, err)
		}
	}
	return out
}

// RunInheritedFD starts a child worker the way `exec 7<secret; exec worker` would, with
// descriptor 7 open on a file and not marked close-on-exec, and checks that its sandbox's
// program holds nothing but its stdin, stdout and stderr, and reads nothing from descriptor 7.
func RunInheritedFD(t *testing.T, env ...string) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("runfleet-inherited-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := startChild(t, childFDs, []*os.File{nil, nil, nil, nil, f}, env...)
	lines, err := c.Lines()
	if err != nil {
		t.Fatalf("child worker: %v", err)
	}
	if want := []string{"fds [0, 1, 2]", "fd7 closed"}; strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the program of a worker started with descriptor 7 open printed %q, want %q", lines, want)
	}
}
