// Package providertest is the conformance suite every sandbox provider passes: the contract of
// package sandbox, the limits, and the escape battery (no network, no host, bombs held, no
// privilege, nothing left for the next job, a uid of its own). A provider's test calls [Run] with a constructor.
package providertest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// Env is what a provider under test runs with.
type Env struct {
	Provider sandbox.Provider
	Profiles profile.Set
	// Secret is a variable set in the worker's own environment; no job may see its value.
	Secret string
	// HostPorts are TCP ports of host services (NATS, Redis) that no sandbox may reach.
	HostPorts []int
	// MeasuresUsage says the provider reports CPU time and peak memory, not only wall time.
	MeasuresUsage bool
	// Leftovers reports what of a destroyed sandbox is still on the host, by provider means
	// (processes, cgroups, containers), or "" when nothing is.
	Leftovers func(t *testing.T, sandboxID string) string
	// Differs names the cases of the contract, escape and hostile batteries (by their subtest
	// path below Run, such as "contract/default signal dispositions") that answer differently on
	// this provider, each with the reason, as documented beside the provider: such a case runs,
	// logs what it saw and the reason, and is skipped rather than checked.
	Differs map[string]string
	// DispatchLog is the provider's dispatch log, if it keeps one: the suite checks that no
	// sandbox ran twice.
	DispatchLog string

	// pool, set by Run, serves Exec with sandboxes created ahead.
	pool *pool.Pool
}

// Result is one sandbox run.
type Result struct {
	ID     string
	Stdout string
	Stderr string
	Exit   sandbox.Exit
}

// Shape returns the shape of the sandboxes tests create, with modest limits.
func Shape(p sandbox.Profile) sandbox.Shape {
	return sandbox.Shape{Profile: p, WorkspaceBytes: 16 << 20, TmpBytes: 16 << 20,
		Limits: sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 128 << 20, Pids: 32, CPUs: 1}}
}

// Job returns a test job with the limits of [Shape].
func Job(id string) sandbox.Job {
	return sandbox.Job{ID: id, Attempt: 1, Worker: "providertest", Limits: Shape(sandbox.Profile{}).Limits}
}

// Create makes a sandbox of profile p and assigns it to a test job with limits mod changed.
func Create(ctx context.Context, t testing.TB, e Env, p sandbox.Profile, mod func(*sandbox.Limits)) sandbox.Sandbox {
	t.Helper()
	sb, err := e.Provider.Create(ctx, Shape(p))
	if err != nil {
		t.Fatalf("Create() error = %v", err)
	}
	assign(ctx, t, sb, mod)
	return sb
}

func assign(ctx context.Context, t testing.TB, sb sandbox.Sandbox, mod func(*sandbox.Limits)) {
	t.Helper()
	j := Job("conformance")
	if mod != nil {
		mod(&j.Limits)
	}
	if err := sb.Assign(ctx, j); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		t.Fatalf("Assign() error = %v", err)
	}
}

// Exec runs req in a fresh sandbox of its language's profile and destroys it. Under [Run], the
// sandbox is one the suite's pool created ahead, before the job was known.
func Exec(ctx context.Context, t testing.TB, e Env, req job.Request, mod func(*sandbox.Limits)) Result {
	t.Helper()
	sb := take(ctx, t, e, e.Profiles[req.Language])
	assign(ctx, t, sb, mod)
	payload, err := profile.Payload(req)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
	if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
		t.Errorf("Destroy() error = %v", derr)
	}
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	return Result{ID: sb.ID(), Stdout: out.String(), Stderr: errb.String(), Exit: exit}
}

// differs skips t, once its case ran, when e says the case answers differently on the provider,
// logging what it saw and why.
func (e Env) differs(t *testing.T, r Result) {
	t.Helper()
	_, path, _ := strings.Cut(t.Name(), "/")
	for name, why := range e.Differs {
		if strings.ReplaceAll(name, " ", "_") == path {
			t.Skipf("answers differently on %s: %s (stdout %q, stderr %q, exit %+v)", e.Provider.Name(), why, clip(r.Stdout), clip(r.Stderr), r.Exit)
		}
	}
}

type check func(t *testing.T, r Result)

func exitCode(want int) check {
	return func(t *testing.T, r Result) {
		t.Helper()
		if r.Exit.Code != want {
			t.Errorf("exit code = %d, want %d (stderr %q)", r.Exit.Code, want, clip(r.Stderr))
		}
	}
}

func stdoutIs(want string) check {
	return func(t *testing.T, r Result) {
		t.Helper()
		if r.Stdout != want {
			t.Errorf("stdout = %q, want %q (stderr %q)", clip(r.Stdout), clip(want), clip(r.Stderr))
		}
	}
}

func stdoutHas(want string) check {
	return func(t *testing.T, r Result) {
		t.Helper()
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("stdout = %q, want it to contain %q (stderr %q)", clip(r.Stdout), want, clip(r.Stderr))
		}
	}
}

func stdoutLacks(bad string) check {
	return func(t *testing.T, r Result) {
		t.Helper()
		if bad != "" && strings.Contains(r.Stdout+r.Stderr, bad) {
			t.Errorf("output contains %q, which must not be visible", bad)
		}
	}
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

// take returns a sandbox of p: from e's pool once one waits there, else created now.
func take(ctx context.Context, t testing.TB, e Env, p sandbox.Profile) sandbox.Sandbox {
	t.Helper()
	if e.pool == nil {
		sb, err := e.Provider.Create(ctx, Shape(p))
		if err != nil {
			t.Fatalf("Create() error = %v", err)
		}
		return sb
	}
	testenv.WaitFor(t, time.Minute, "a waiting "+p.Name+" sandbox", func() bool { return e.pool.WaitingFor(p.Name) > 0 })
	sb, warm, err := e.pool.Take(ctx, Shape(p))
	if err != nil {
		t.Fatalf("Take() error = %v", err)
	}
	if !warm {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		t.Fatalf("Take() served a %s sandbox cold while one waited", p.Name)
	}
	return sb
}

// Run runs the whole suite against e. Its jobs run in sandboxes a pool created ahead, as a
// worker's do, but for the cases that test Create itself.
func Run(t *testing.T, e Env) {
	ctx, stop := context.WithCancel(t.Context())
	shapes := make([]sandbox.Shape, 0, len(e.Profiles))
	for _, name := range e.Profiles.Names() {
		shapes = append(shapes, Shape(e.Profiles[name]))
	}
	e.pool = pool.New(e.Provider, shapes, pool.Options{Size: 2, Refills: 2})
	var wg sync.WaitGroup
	wg.Go(func() { e.pool.Run(ctx) })
	defer func() {
		stop()
		wg.Wait()
		if e.pool.Waiting() != 0 {
			t.Errorf("after the pool's Run returned, %d sandboxes wait", e.pool.Waiting())
		}
		if e.DispatchLog != "" {
			checkUsedOnce(t, e.DispatchLog)
		}
	}()
	t.Run("contract", func(t *testing.T) { runContract(ctx, t, e) })
	t.Run("escape", func(t *testing.T) { runEscape(ctx, t, e) })
	t.Run("hostile", func(t *testing.T) { runHostile(ctx, t, e) })
	t.Run("fresh", func(t *testing.T) { runFresh(ctx, t, e) })
	t.Run("files", func(t *testing.T) { runFiles(ctx, t, e) })
	t.Run("pool past", func(t *testing.T) { runPoolPast(ctx, t, e) })
	t.Run("distinct uids", func(t *testing.T) { runDistinctUIDs(ctx, t, e) })
}

// checkUsedOnce counts, from the provider's own dispatch log, that no sandbox took two payloads.
func checkUsedOnce(t *testing.T, path string) {
	uses, err := sandbox.CountSandboxUses(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) == 0 {
		t.Errorf("dispatch log %s is empty", path)
	}
	for id, n := range uses {
		if n != 1 {
			t.Errorf("sandbox %s took %d payloads, want 1", id, n)
		}
	}
}

func runContract(ctx context.Context, t *testing.T, e Env) {
	cases := []struct {
		name, lang, code, stdin string
		env                     map[string]string
		files                   []job.File
		mod                     func(*sandbox.Limits)
		checks                  []check
	}{
		{name: "python stdout", lang: "python3", code: "print(6*7)", checks: []check{exitCode(0), stdoutIs("42\n")}},
		{name: "node stdout", lang: "nodejs", code: "console.log(6*7)", checks: []check{exitCode(0), stdoutIs("42\n")}},
		{name: "python stdin after payload", lang: "python3", code: "import sys; print(sys.stdin.read().upper())", stdin: "hello",
			checks: []check{stdoutIs("HELLO\n")}},
		{name: "node stdin after payload", lang: "nodejs", code: "let d='';process.stdin.on('data',c=>d+=c).on('end',()=>console.log(d.toUpperCase()))", stdin: "hello",
			checks: []check{stdoutIs("HELLO\n")}},
		{name: "python exit code", lang: "python3", code: "import sys; sys.exit(3)", checks: []check{exitCode(3)}},
		{name: "node exit code", lang: "nodejs", code: "process.exit(4)", checks: []check{exitCode(4)}},
		{name: "stderr apart", lang: "python3", code: "import sys; sys.stderr.write('e'); print('o')", checks: []check{stdoutIs("o\n"),
			func(t *testing.T, r Result) {
				if r.Stderr != "e" {
					t.Errorf("stderr = %q, want %q", r.Stderr, "e")
				}
			}}},
		{name: "env given", lang: "python3", code: "import os; print(os.environ['GREETING'])",
			env: map[string]string{"GREETING": "hi"}, checks: []check{stdoutIs("hi\n")}},
		{name: "node env after start", lang: "nodejs", code: "console.log(process.env.NODE_OPTIONS)",
			env: map[string]string{"NODE_OPTIONS": "--require /nonexistent"}, checks: []check{exitCode(0), stdoutIs("--require /nonexistent\n")}},
		{name: "files given", lang: "python3", code: "print(open('bin/all.bin', 'rb').read().hex(), open('t.txt').read())",
			files:  []job.File{{Path: "bin/all.bin", Content: []byte{0, 1, 2, 0xff, '\n', '"', '\\'}}, {Path: "t.txt", Content: []byte("é <&>")}},
			checks: []check{stdoutIs("000102ff0a225c é <&>\n")}},
		{name: "node files given", lang: "nodejs", code: "const fs = require('fs'); console.log(fs.readFileSync('t.txt', 'utf8'))",
			files: []job.File{{Path: "t.txt", Content: []byte("é <&>")}}, checks: []check{stdoutIs("é <&>\n")}},
		{name: "workdir is workspace", lang: "python3", code: "import os; print(os.getcwd())", checks: []check{stdoutIs("/workspace\n")}},
		// The program starts with every signal at its default, as a program started from a shell
		// does: a child it sends SIGTERM ends. (Whatever the sandbox's own init ignores must not
		// reach it: SIG_IGN survives exec.)
		{name: "default signal dispositions", lang: "python3",
			// A child's, since CPython ignores SIGPIPE and SIGXFSZ itself and restores them for children.
			code: "import subprocess\nst = subprocess.run(['cat', '/proc/self/status'], capture_output=True, text=True).stdout\n" +
				"print(' '.join(l.replace('\\t', ' ') for l in st.splitlines() if l.startswith(('SigBlk', 'SigIgn'))))",
			checks: []check{exitCode(0), stdoutIs("SigBlk: 0000000000000000 SigIgn: 0000000000000000\n")}},
		// RLIMIT_CORE is exactly 1, soft and hard: 0 stops a core file but not a pipe core_pattern's
		// helper, which the kernel starts as root outside the sandbox unless the limit is 1.
		{name: "cores off for any core_pattern", lang: "python3",
			code:   "import resource; print(resource.getrlimit(resource.RLIMIT_CORE))",
			checks: []check{exitCode(0), stdoutIs("(1, 1)\n")}},
		// review: the job may lower its own limit to 0 (lowering needs no privilege and Docker's
		// seccomp allowlist has setrlimit and prlimit64), and at 0 the kernel starts a pipe
		// core_pattern's helper, as root outside the sandbox, when the job then crashes.
		{name: "cores stay off when the job lowers its limit", lang: "python3",
			// CPython reports the refusal (EPERM) as ValueError; what counts is the limit after.
			code: "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\nexcept (OSError, ValueError):\n    pass\n" +
				"print(resource.getrlimit(resource.RLIMIT_CORE))",
			checks: []check{exitCode(0), stdoutIs("(1, 1)\n")}},
		{name: "timeout", lang: "python3", code: "import time\nprint('before', flush=True)\ntime.sleep(30)",
			// Long enough for the interpreter to start and print on a loaded machine.
			mod: func(l *sandbox.Limits) { l.Timeout = 2 * time.Second },
			checks: []check{stdoutIs("before\n"), func(t *testing.T, r Result) {
				if !r.Exit.TimedOut || r.Exit.Usage.Wall > 8*time.Second {
					t.Errorf("TimedOut = %v after %v, want true within 8s", r.Exit.TimedOut, r.Exit.Usage.Wall)
				}
			}}},
		{name: "memory bomb", lang: "python3", code: "x = []\nwhile True: x.append(bytearray(16<<20))",
			mod: func(l *sandbox.Limits) { l.MemoryBytes = 64 << 20 },
			checks: []check{func(t *testing.T, r Result) {
				if !r.Exit.OOM || r.Exit.Code == 0 {
					t.Errorf("OOM = %v, code %d, want an OOM kill (stderr %q)", r.Exit.OOM, r.Exit.Code, clip(r.Stderr))
				}
			}}},
		// Socket buffers count against the job's memory (cgroup v1 charges TCP only once its
		// kmem.tcp limit is written): 40 loopback connections that are never read, each with room
		// for about 10 MiB by autotuning, hold 317 MiB in the host's TCP memory where nothing
		// bounds them, and tcp_mem is shared by every socket of the host.
		{name: "socket buffers charged", lang: "python3", code: tcpHoardCode,
			mod: func(l *sandbox.Limits) { l.MemoryBytes = 32 << 20 },
			checks: []check{func(t *testing.T, r Result) {
				held, err := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
				if r.Exit.OOM || err == nil && held < 64 {
					return
				}
				t.Errorf("the job held %q MiB in socket buffers at a 32 MiB limit (exit %d, OOM %v), want under 64 or an OOM kill (stderr %q)",
					strings.TrimSpace(string(r.Stdout)), r.Exit.Code, r.Exit.OOM, clip(r.Stderr))
			}}},
		// A pooled sandbox waits under its shape's 128 MiB; its job's larger limit holds.
		{name: "memory raised at assign", lang: "python3", code: "x = bytearray(160 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint(len(x) >> 20)",
			mod: func(l *sandbox.Limits) { l.MemoryBytes = 256 << 20 }, checks: []check{exitCode(0), stdoutIs("160\n")}},
		{name: "node timers run to the end", lang: "nodejs", code: "setTimeout(() => console.log('timer'), 50)\nPromise.resolve().then(() => console.log('promise'))",
			checks: []check{exitCode(0), stdoutIs("promise\ntimer\n")}},
		{name: "usage measured", lang: "python3", code: "sum(range(10**6))", checks: []check{exitCode(0), func(t *testing.T, r Result) {
			u := r.Exit.Usage
			if u.Wall <= 0 {
				t.Errorf("Usage.Wall = %v, want > 0", u.Wall)
			}
			if !e.MeasuresUsage {
				return
			}
			// The interpreter alone takes some CPU time and more than a MiB of memory.
			if u.CPU == nil || *u.CPU <= 0 || u.MaxRSS == nil || *u.MaxRSS < 1<<20 {
				t.Errorf("Usage = wall %v, cpu %v, max rss %v; want cpu > 0 and max rss > 1 MiB", u.Wall, deref(u.CPU), deref(u.MaxRSS))
			} else {
				t.Logf("usage: wall %v, cpu %v, peak memory %d KiB", u.Wall, *u.CPU, *u.MaxRSS>>10)
			}
		}}},
		// A sandbox from the pool started and waited before its job came: that is not the job's.
		// The program prints its process's CPU time so far (the interpreter's start-up, which
		// the sandbox spent before the job came); the job's own CPU time is well below it.
		{name: "usage from assignment", lang: "python3", code: "import time\nprint(1)\nprint(int(time.process_time() * 1e6))",
			checks: []check{exitCode(0), func(t *testing.T, r Result) {
				if !e.MeasuresUsage {
					return
				}
				lines := strings.Fields(r.Stdout)
				startUS, err := strconv.Atoi(lines[len(lines)-1])
				if err != nil || r.Exit.Usage.CPU == nil {
					t.Fatalf("stdout %q, cpu %v: want the start-up's CPU time printed and the job's measured", r.Stdout, deref(r.Exit.Usage.CPU))
				}
				start := time.Duration(startUS) * time.Microsecond
				if got := *r.Exit.Usage.CPU; got >= start/2 {
					t.Errorf("Usage.CPU = %v for print(1), want well below the interpreter's start-up, %v", got, start)
				} else {
					t.Logf("print(1): cpu %v; the interpreter's start-up before it: %v", got, start)
				}
			}}},
		// and the job's own CPU time is all counted.
		{name: "usage counts the job", lang: "python3", code: "import time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 0.3: pass",
			checks: []check{exitCode(0), func(t *testing.T, r Result) {
				if e.MeasuresUsage && (r.Exit.Usage.CPU == nil || *r.Exit.Usage.CPU < 300*time.Millisecond) {
					t.Errorf("Usage.CPU = %v for a job that burnt 300ms of CPU, want at least that", deref(r.Exit.Usage.CPU))
				}
			}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Exec(ctx, t, e, job.Request{Language: c.lang, Code: c.code, Stdin: c.stdin, Env: c.env, Files: c.files}, c.mod)
			e.differs(t, r)
			for _, ch := range c.checks {
				ch(t, r)
			}
			checkLeftovers(ctx, t, e, r.ID)
		})
	}
	t.Run("kill on cancel", func(t *testing.T) {
		// Cancel once the program has printed, never after a fixed time that may pass before it runs.
		sb := Create(ctx, t, e, e.Profiles["python3"], nil)
		defer sb.Destroy(context.WithoutCancel(ctx))
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		payload, _ := profile.Payload(job.Request{Code: "import time\nprint('started', flush=True)\ntime.sleep(30)"})
		var canceled time.Time
		out := writerFunc(func(b []byte) (int, error) {
			if canceled.IsZero() {
				canceled = time.Now()
				cancel()
			}
			return len(b), nil
		})
		exit, err := sb.Run(cctx, bytes.NewReader(payload), out, &bytes.Buffer{})
		if err != nil || !exit.Killed || canceled.IsZero() || time.Since(canceled) > 5*time.Second {
			t.Errorf("Run() = %+v, %v; want Killed within 5s of the cancel after the first output", exit, err)
		}
	})
	t.Run("writer error kills", func(t *testing.T) {
		sb := Create(ctx, t, e, e.Profiles["python3"], nil)
		defer sb.Destroy(context.WithoutCancel(ctx))
		payload, _ := profile.Payload(job.Request{Code: "while True: print('x'*1000)"})
		exit, err := sb.Run(ctx, bytes.NewReader(payload), &failingWriter{after: 64 << 10}, &bytes.Buffer{})
		if err != nil || !exit.Killed {
			t.Errorf("Run() = %+v, %v; want Killed", exit, err)
		}
	})
	t.Run("destroy unused", func(t *testing.T) {
		sb, err := e.Provider.Create(ctx, Shape(e.Profiles["python3"]))
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy() error = %v", err)
		}
		checkLeftovers(ctx, t, e, sb.ID())
	})
}

// remover is a provider whose Destroy may leave the removal of an ended sandbox running
// (sandbox.Sandbox's contract); WaitRemovals returns once none is pending.
type remover interface {
	WaitRemovals(ctx context.Context) error
}

// checkLeftovers fails t if anything of the destroyed sandbox id is left on the host once the
// provider's pending removals are done.
func checkLeftovers(ctx context.Context, t *testing.T, e Env, id string) {
	t.Helper()
	if e.Leftovers == nil {
		return
	}
	if r, ok := e.Provider.(remover); ok {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := r.WaitRemovals(wctx); err != nil {
			t.Errorf("WaitRemovals() error = %v", err)
		}
	}
	if left := e.Leftovers(t, id); left != "" {
		t.Errorf("after Destroy, left on the host: %s", left)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// writerFunc is called by one copying goroutine at a time.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

type failingWriter struct {
	mu    sync.Mutex
	n     int
	after int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	if w.n > w.after {
		return 0, fmt.Errorf("output bound reached")
	}
	return len(p), nil
}

// tcpHoardCode fills the buffers of 40 loopback connections that are never read and prints the
// MiB it queued.
const tcpHoardCode = `import socket
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen(64)
held, conns, chunk = 0, [], b'x' * (1 << 20)
for _ in range(40):
    c = socket.create_connection(srv.getsockname())
    s, _ = srv.accept()
    c.setblocking(False)
    while True:
        try:
            n = c.send(chunk)
        except OSError:
            break
        if n == 0:
            break
        held += n
    conns.append((c, s))
print(held >> 20)
`
