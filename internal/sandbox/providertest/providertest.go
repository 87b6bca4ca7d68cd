// Package providertest is the conformance suite every sandbox provider passes: the contract of
// package sandbox, the limits, and the escape battery (no network, no host, bombs held, no
// privilege, nothing left for the next job). A provider's test calls [Run] with a constructor.
package providertest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/sandbox"
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
}

// Result is one sandbox run.
type Result struct {
	ID     string
	Stdout string
	Stderr string
	Exit   sandbox.Exit
}

// Spec returns a spec with modest limits for tests.
func Spec(p sandbox.Profile) sandbox.Spec {
	return sandbox.Spec{JobID: "conformance", Attempt: 1, Worker: "providertest", Profile: p,
		Timeout: 10 * time.Second, MemoryBytes: 128 << 20, Pids: 32, CPUs: 1,
		WorkspaceBytes: 16 << 20, TmpBytes: 16 << 20}
}

// Exec runs req in a fresh sandbox of its language's profile and destroys it.
func Exec(ctx context.Context, t testing.TB, e Env, req job.Request, mod func(*sandbox.Spec)) Result {
	t.Helper()
	spec := Spec(e.Profiles[req.Language])
	if mod != nil {
		mod(&spec)
	}
	sb, err := e.Provider.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create() error = %v", err)
	}
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

// Run runs the whole suite against e.
func Run(t *testing.T, e Env) {
	ctx := t.Context()
	t.Run("contract", func(t *testing.T) { runContract(ctx, t, e) })
	t.Run("escape", func(t *testing.T) { runEscape(ctx, t, e) })
	t.Run("fresh", func(t *testing.T) { runFresh(ctx, t, e) })
	t.Run("files", func(t *testing.T) { runFiles(ctx, t, e) })
}

func runContract(ctx context.Context, t *testing.T, e Env) {
	cases := []struct {
		name, lang, code, stdin string
		env                     map[string]string
		mod                     func(*sandbox.Spec)
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
		{name: "workdir is workspace", lang: "python3", code: "import os; print(os.getcwd())", checks: []check{stdoutIs("/workspace\n")}},
		{name: "timeout", lang: "python3", code: "import time\nprint('before', flush=True)\ntime.sleep(30)",
			// Long enough for the interpreter to start and print on a loaded machine.
			mod: func(s *sandbox.Spec) { s.Timeout = 2 * time.Second },
			checks: []check{stdoutIs("before\n"), func(t *testing.T, r Result) {
				if !r.Exit.TimedOut || r.Exit.Usage.Wall > 8*time.Second {
					t.Errorf("TimedOut = %v after %v, want true within 8s", r.Exit.TimedOut, r.Exit.Usage.Wall)
				}
			}}},
		{name: "memory bomb", lang: "python3", code: "x = []\nwhile True: x.append(bytearray(16<<20))",
			mod: func(s *sandbox.Spec) { s.MemoryBytes = 64 << 20 },
			checks: []check{func(t *testing.T, r Result) {
				if !r.Exit.OOM || r.Exit.Code == 0 {
					t.Errorf("OOM = %v, code %d, want an OOM kill (stderr %q)", r.Exit.OOM, r.Exit.Code, clip(r.Stderr))
				}
			}}},
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Exec(ctx, t, e, job.Request{Language: c.lang, Code: c.code, Stdin: c.stdin, Env: c.env}, c.mod)
			for _, ch := range c.checks {
				ch(t, r)
			}
			if e.Leftovers != nil {
				if left := e.Leftovers(t, r.ID); left != "" {
					t.Errorf("after Destroy, left on the host: %s", left)
				}
			}
		})
	}
	t.Run("kill on cancel", func(t *testing.T) {
		// Cancel once the program has printed, never after a fixed time that may pass before it runs.
		sb, err := e.Provider.Create(ctx, Spec(e.Profiles["python3"]))
		if err != nil {
			t.Fatal(err)
		}
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
		spec := Spec(e.Profiles["python3"])
		sb, err := e.Provider.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(context.WithoutCancel(ctx))
		payload, _ := profile.Payload(job.Request{Code: "while True: print('x'*1000)"})
		exit, err := sb.Run(ctx, bytes.NewReader(payload), &failingWriter{after: 64 << 10}, &bytes.Buffer{})
		if err != nil || !exit.Killed {
			t.Errorf("Run() = %+v, %v; want Killed", exit, err)
		}
	})
	t.Run("destroy unused", func(t *testing.T) {
		sb, err := e.Provider.Create(ctx, Spec(e.Profiles["python3"]))
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy() error = %v", err)
		}
		if e.Leftovers != nil {
			if left := e.Leftovers(t, sb.ID()); left != "" {
				t.Errorf("after Destroy, left on the host: %s", left)
			}
		}
	})
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
