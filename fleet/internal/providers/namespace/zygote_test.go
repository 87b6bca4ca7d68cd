package namespace_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// zygoteEnv is a provider whose python3 sandboxes are forked from a zygote.
func zygoteEnv(t *testing.T) (*namespace.Provider, providertest.Env) {
	t.Helper()
	p := newProvider(t, "runfleet-test-zygote")
	return p, providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(t), "")}
}

// runCode runs code in a fresh python3 sandbox and returns its stdout, failing t unless it exits 0.
func runCode(ctx context.Context, t *testing.T, e providertest.Env, code string) string {
	t.Helper()
	r := providertest.Exec(ctx, t, e, job.Request{Language: "python3", Code: code}, nil)
	if r.Exit.Code != 0 {
		t.Fatalf("exit %+v, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// TestZygoteFreshState: two jobs forked from one zygote in turn see different random states, and
// nothing of the first (files, shared memory, fds, threads, module state, environment) reaches
// the second; the hash secret is the zygote's, shared, as its doc says.
func TestZygoteFreshState(t *testing.T) {
	p, e := zygoteEnv(t)
	ctx := t.Context()
	const probe = `
import os, sys, random, builtins, threading
print("random", random.getrandbits(64))
print("hash", hash("runfleet"))
print("pid", os.getpid(), "ppid", os.getppid())
print("fds", sorted(os.listdir("/proc/self/fd")))
print("threads", threading.active_count(), len(os.listdir("/proc/self/task")))
print("procs", sorted(d for d in os.listdir("/proc") if d.isdigit()))
print("left", [p for p in ("/tmp/left", "/workspace/left", "/dev/shm/left") if os.path.exists(p)],
      getattr(builtins, "left", None), os.environ.get("LEFT"), getattr(random.random, "__self__", None) is random._inst,
      getattr(sys.modules.get("json"), "left", None))
`
	const leave = `
import os, builtins, threading, random, json, time
for p in ("/tmp/left", "/workspace/left", "/dev/shm/left"):
    open(p, "w").write("x")
builtins.left = 1
json.left = 1
os.environ["LEFT"] = "1"
random.random = lambda: 4
keep = os.open("/tmp/left", os.O_RDONLY)
os.set_inheritable(keep, True)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("left")
`
	first := runCode(ctx, t, e, probe)
	zygotes := namespace.ZygotePids(p)
	if zygotes["python3"] == 0 {
		t.Fatalf("no python3 zygote after a job (zygotes %v)", zygotes)
	}
	runCode(ctx, t, e, leave)
	second := runCode(ctx, t, e, probe)
	if got := namespace.ZygotePids(p)["python3"]; got != zygotes["python3"] {
		t.Fatalf("zygote pid %d, then %d: want the three jobs forked from one", zygotes["python3"], got)
	}
	field := func(out, key string) string {
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				return v
			}
		}
		t.Fatalf("no %q line in %q", key, out)
		return ""
	}
	if a, b := field(first, "random"), field(second, "random"); a == b {
		t.Errorf("random.getrandbits(64) = %s in both jobs, want a fresh state each", a)
	}
	if a, b := field(first, "hash"), field(second, "hash"); a != b {
		t.Logf("hash secrets differ (%s, %s): the zygote was restarted between", a, b)
	}
	for _, out := range []string{first, second} {
		if got, want := field(out, "left"), "[] None None True None"; got != want {
			t.Errorf("leftovers = %s, want %s", got, want)
		}
		if got, want := field(out, "fds"), "['0', '1', '2', '3']"; got != want {
			t.Errorf("fds = %s, want %s (stdio and listdir's own)", got, want)
		}
		if got, want := field(out, "threads"), "1 1"; got != want {
			t.Errorf("threads = %s, want %s", got, want)
		}
		// The supervisor is hidden; the program's parent, the worker, is outside the namespace.
		pid, ppid, _ := strings.Cut(field(out, "pid"), " ppid ")
		if got, want := field(out, "procs"), "['"+pid+"']"; got != want || ppid != "0" {
			t.Errorf("/proc = %s, parent %s; want %s alone and parent 0", got, ppid, want)
		}
	}
}

// TestZygoteUntouchable: a job can neither signal, trace nor read the zygote it was forked from,
// holds no capability, and runs under the sandbox's filter and limits.
func TestZygoteUntouchable(t *testing.T) {
	p, e := zygoteEnv(t)
	ctx := t.Context()
	runCode(ctx, t, e, "pass")
	z := namespace.ZygotePids(p)["python3"]
	code := fmt.Sprintf(`
import os, ctypes, signal
libc = ctypes.CDLL(None, use_errno=True)
z = %d
for name, f in (("kill", lambda: os.kill(z, signal.SIGKILL)), ("pgkill", lambda: os.killpg(z, signal.SIGKILL)),
                ("open", lambda: open("/proc/%%d/mem" %% z, "rb")), ("environ", lambda: open("/proc/%%d/environ" %% z, "rb"))):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, e.errno)
r = libc.ptrace(16, z, 0, 0)  # PTRACE_ATTACH
print("ptrace", r, ctypes.get_errno())
st = open("/proc/self/status").read()
print(" ".join(l for l in st.split("\n") if l.split(":")[0] in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")))
print("cgroup", open("/proc/self/cgroup").read().strip().split("\n")[0].split(":", 2)[2])
`, z)
	out := runCode(ctx, t, e, code)
	for _, want := range []string{"kill 3\n", "pgkill 3\n", "open 2\n", "environ 2\n", "ptrace -1 ",
		"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "cgroup /\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout %q lacks %q", out, want)
		}
	}
	if err := syscall.Kill(z, 0); err != nil {
		t.Errorf("zygote %d after the job: %v", z, err)
	}
	if got := namespace.ZygotePids(p)["python3"]; got != z {
		t.Errorf("zygote %d replaced by %d", z, got)
	}
}

// TestZygoteKilled: killing the zygote fails no sandbox it forked, and the next sandbox is
// forked by a new one.
func TestZygoteKilled(t *testing.T) {
	p, e := zygoteEnv(t)
	ctx := t.Context()
	sb := providertest.Create(ctx, t, e, e.Profiles["python3"], nil)
	defer sb.Destroy(context.WithoutCancel(ctx))
	z := namespace.ZygotePids(p)["python3"]
	proc, _ := os.FindProcess(z)
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	payload, err := profile.Payload(job.Request{Language: "python3", Code: "print('forked before')"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	exit, err := sb.Run(ctx, strings.NewReader(string(payload)), &out, &errb)
	if err != nil || exit.Code != 0 || out.String() != "forked before\n" {
		t.Errorf("Run() = %+v, %v, stdout %q, stderr %q; want the job done", exit, err, out.String(), errb.String())
	}
	if got := runCode(ctx, t, e, "print('next')"); got != "next\n" {
		t.Errorf("next job stdout %q", got)
	}
	if got := namespace.ZygotePids(p)["python3"]; got == z || got == 0 {
		t.Errorf("zygote after the kill = %d, want a new one (killed %d)", got, z)
	}
}

var _ sandbox.Provider = (*namespace.Provider)(nil)

// TestZygoteData: python3-data's zygote has numpy, pandas and matplotlib's pyplot imported (its
// font list built once); each child
// gets its own numpy generator state, starts BLAS threads of its own, and draws to files.
func TestZygoteData(t *testing.T) {
	p, e := zygoteEnv(t)
	if !e.Profiles.Has(profile.DataProfile) {
		testenv.Missing(t, "the root file system lacks %s's packages", profile.DataProfile)
	}
	ctx := t.Context()
	const code = `
import sys, numpy, matplotlib.pyplot as plt
print("preloaded", "pandas" in sys.modules)
print("numpy", numpy.random.randint(1 << 30))
a = numpy.ones((300, 300))
print("dot", (a @ a)[0, 0])
plt.plot([1, 2]); plt.savefig("/workspace/plot.png")
print("plot ok")
`
	var outs []string
	for range 2 {
		// An emulated guest takes seconds for the draw.
		r := providertest.Exec(ctx, t, e, job.Request{Language: profile.DataProfile, Code: code}, func(l *sandbox.Limits) { l.Timeout = 2 * time.Minute })
		if r.Exit.Code != 0 || !strings.Contains(r.Stdout, "dot 300.0\nplot ok\n") {
			t.Fatalf("exit %+v, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
		}
		if r.Stderr != "" {
			t.Errorf("stderr %q, want none", r.Stderr)
		}
		outs = append(outs, r.Stdout)
	}
	if namespace.ZygotePids(p)[profile.DataProfile] == 0 {
		t.Errorf("no %s zygote", profile.DataProfile)
	}
	if !strings.Contains(outs[0], "preloaded True") {
		t.Errorf("stdout %q: want pandas imported by the zygote", outs[0])
	}
	if a, b := strings.Split(outs[0], "\n")[1], strings.Split(outs[1], "\n")[1]; a == b {
		t.Errorf("numpy draws %q in both jobs, want a fresh generator each", a)
	}
}

// BenchmarkDataPlot compares, in one run, a python3-data job that draws a plot with its
// interpreter exec'd and forked from the profile's zygote (numpy, pandas and pyplot imported):
//
//	go test -run '^$' -bench DataPlot -benchtime 20x ./internal/providers/namespace/
func BenchmarkDataPlot(b *testing.B) {
	for _, c := range []struct {
		name     string
		noZygote bool
	}{{"exec", true}, {"zygote", false}} {
		testenv.NeedRoot(b)
		p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: b.TempDir(), UIDBase: testUIDBase,
			UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), NoZygote: c.noZygote})
		if err != nil {
			testenv.Missing(b, "namespace provider: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		e := providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(b), "")}
		if !e.Profiles.Has(profile.DataProfile) {
			testenv.Missing(b, "the root file system lacks %s's packages", profile.DataProfile)
		}
		b.Run(c.name, func(b *testing.B) { providertest.BenchSteps(b, e, profile.DataProfile, providertest.PlotCode) })
	}
}

// TestZygoteThatCannotStart: a profile whose zygote fails its imports (python3-data's on a root
// without numpy's libraries) still runs its jobs, each exec'd as without zygotes, and the
// provider says so once instead of trying a zygote for every sandbox.
func TestZygoteThatCannotStart(t *testing.T) {
	testenv.NeedRoot(t)
	var logs testenv.Buffer
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test-zygote", StateDir: t.TempDir(), UIDBase: testUIDBase,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	py := profile.Builtin(testenv.RootFS(t), "")["python3"]
	py.Zygote = append(slices.Clone(py.Zygote), "runfleet_no_such_module")
	e := providertest.Env{Provider: p, Profiles: profile.Set{"python3": py}}
	for i := range 2 {
		if out := runCode(t.Context(), t, e, "import os; print(os.getppid())"); out != "1\n" {
			t.Errorf("job %d: parent %q, want 1: the program exec'd by its supervisor", i, out)
		}
	}
	if n := strings.Count(logs.String(), "zygote could not start"); n != 1 {
		t.Errorf("the provider said %d times that the zygote could not start, want once:\n%s", n, logs.String())
	}
	if pids := namespace.ZygotePids(p); pids["python3"] != 0 {
		t.Errorf("zygote %d still running", pids["python3"])
	}
}

// TestForkedSeesCgroupsAsExecd: a program forked from a zygote sees of the cgroups what an exec'd
// one sees: the cgroup namespace it makes once in the sandbox's cgroup is rooted where the
// supervisor's is, so /proc/self/cgroup and mountinfo show nothing above the sandbox's cgroup.
func TestForkedSeesCgroupsAsExecd(t *testing.T) {
	const probe = `
import os
print(open("/proc/self/cgroup").read())
print("".join(l for l in open("/proc/self/mountinfo") if "cgroup" in l))
for d in ("/sys/fs/cgroup",):
    print(d, os.path.exists(d) and sorted(os.listdir(d)))
`
	prof := profile.Builtin(testenv.RootFS(t), "")
	zygotes := providertest.Env{Provider: newProvider(t, "runfleet-test-zygote"), Profiles: prof}
	if out := runCode(t.Context(), t, zygotes, "import os; print(os.getppid())"); out == "1\n" {
		t.Fatal("the program's parent is its supervisor: not forked from a zygote")
	}
	forked := runCode(t.Context(), t, zygotes, probe)
	execd := runCode(t.Context(), t, providertest.Env{Provider: newLoggedProvider(t, "runfleet-test", "", true), Profiles: prof}, probe)
	if forked != execd {
		t.Errorf("forked program sees\n%s\nan exec'd one\n%s", forked, execd)
	}
}

// TestZygoteWithoutClone3: under a seccomp filter that answers clone3 ENOSYS around the worker
// (Docker's default profile), with which a zygote cannot fork, a python3 job still runs: its
// sandbox execs the interpreter. The test runs itself again under such a filter, which a
// process cannot drop.
func TestZygoteWithoutClone3(t *testing.T) {
	testenv.NeedRoot(t)
	if os.Getenv("RUNFLEET_TEST_NO_CLONE3") == "" {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestZygoteWithoutClone3$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RUNFLEET_TEST_NO_CLONE3=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("under a filter answering clone3 ENOSYS: %v\n%s", err, out)
		}
		return
	}
	filter := seccomp.Filter{Flag: seccomp.FilterFlagTSync, Policy: seccomp.Policy{DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}}}}}
	if err := seccomp.LoadFilter(filter); err != nil {
		t.Fatal(err)
	}
	_, e := zygoteEnv(t)
	if out := runCode(t.Context(), t, e, "print('ok')"); out != "ok\n" {
		t.Errorf("stdout %q, want ok", out)
	}
}
