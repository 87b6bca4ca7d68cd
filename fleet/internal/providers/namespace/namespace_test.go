package namespace_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// Test sandboxes take uids from testUIDBase, away from the default range of real workers.
const testUIDBase = 400000

func TestMain(m *testing.M) {
	namespace.Init()
	providertest.ChildMain(func(context.Context) (providertest.Env, func(), error) {
		base, err := strconv.Atoi(cmp.Or(os.Getenv("RUNFLEET_TEST_UID_BASE"), strconv.Itoa(testUIDBase)))
		if err != nil {
			return providertest.Env{}, nil, err
		}
		p, err := namespace.New(namespace.Options{CgroupName: os.Getenv("RUNFLEET_TEST_CGROUP"),
			StateDir: os.Getenv("RUNFLEET_TEST_STATE"), UIDBase: base, UIDLockDir: os.Getenv("RUNFLEET_TEST_UID_LOCKS")})
		if err != nil {
			return providertest.Env{}, nil, err
		}
		return providertest.Env{Provider: p, Profiles: profile.Builtin(os.Getenv("RUNFLEET_TEST_ROOTFS"), "")}, func() { _ = p.Close() }, nil
	})
	goleak.VerifyTestMain(m)
}

func newProvider(t testing.TB, cgroup string) *namespace.Provider {
	t.Helper()
	return newLoggedProvider(t, cgroup, "", false)
}

// newLoggedProvider is newProvider with a dispatch log at path, and no zygote if noZygote.
func newLoggedProvider(t testing.TB, cgroup, path string, noZygote bool) *namespace.Provider {
	t.Helper()
	testenv.NeedRoot(t)
	p, err := namespace.New(namespace.Options{CgroupName: cgroup, StateDir: t.TempDir(), UIDBase: testUIDBase,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), DispatchLog: sandbox.DispatchLog{Path: path}, NoZygote: noZygote})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	return p
}

// sandboxCgroups returns the cgroup directories of a sandbox under the parent cgroup name, on
// either hierarchy: v1 (a directory per controller) and v2 (one, under the worker's own cgroup).
func sandboxCgroups(name, id string) []string {
	out, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name, "*", id))
	if own, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(own), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				base := filepath.Join("/sys/fs/cgroup", strings.TrimSuffix(p, "/runfleet-worker"))
				m, _ := filepath.Glob(filepath.Join(base, name, "*", id))
				out = append(out, m...)
			}
		}
	}
	return out
}

// TestConformance runs the battery with the test binary re-executed as the supervisor and
// python3 sandboxes forked from zygotes, as a worker runs by default (the cgroup v2 guest runs it).
func TestConformance(t *testing.T) {
	secret := "runfleet-secret-" + t.Name()
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	dlog := filepath.Join(t.TempDir(), "dispatch.log")
	p := newLoggedProvider(t, "runfleet-test", dlog, false)
	providertest.Run(t, providertest.Env{
		DispatchLog:   dlog,
		Provider:      p,
		Profiles:      profile.Builtin(testenv.RootFS(t), ""),
		Secret:        secret,
		MeasuresUsage: true,
		Leftovers: func(t *testing.T, id string) string {
			return strings.Join(sandboxCgroups("runfleet-test", id), " ")
		},
		Differs: map[string]string{"contract/usage from assignment": "a forked interpreter's process_time counts from the fork, " +
			"not from the interpreter's start (the zygote's): the baseline the case compares with is the child's set-up alone"},
	})
}

// smallSupervisor builds the static supervisor of internal/cmd/sandboxinit and copies it
// privately, as a worker built by the Makefile does.
func smallSupervisor(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	bin, err := testenv.BuildProgram(dir, "internal/cmd/sandboxinit")
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervise.PrivateCopyFile(bin, filepath.Join(dir, "private"))
	if err != nil {
		t.Fatal(err)
	}
	return sup
}

// TestConformanceSmallSupervisor runs the whole battery with the small static supervisor that
// the Makefile's worker embeds, instead of the test binary re-executed, and every interpreter
// exec'd by its supervisor (--zygote=false).
func TestConformanceSmallSupervisor(t *testing.T) {
	testenv.NeedRoot(t)
	sup := smallSupervisor(t)
	secret := "runfleet-secret-" + t.Name()
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test-sup", StateDir: t.TempDir(), UIDBase: testUIDBase,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), Supervisor: sup, NoZygote: true})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	e := providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(t), ""), Secret: secret, MeasuresUsage: true,
		Leftovers: func(t *testing.T, id string) string {
			return strings.Join(sandboxCgroups("runfleet-test-sup", id), " ")
		}}
	sb := providertest.Create(t.Context(), t, e, e.Profiles["python3"], nil)
	if got := supervisorsRunning(sup); got != 1 {
		t.Errorf("supervisors running %s = %d, want the waiting sandbox's", sup, got)
	}
	_ = sb.Destroy(t.Context())
	providertest.Run(t, e)
}

// supervisorsRunning counts the processes whose executable is exe.
func supervisorsRunning(exe string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == exe {
			n++
		}
	}
	return n
}

// BenchmarkSupervisor compares, in one run, a sandbox's steps and CPU with the worker's own
// binary as its supervisor (what a worker built without the Makefile, `go install`, does), with
// the small static one the Makefile embeds, and with that one and the interpreter forked from a
// zygote (the worker's default); it adds the zygote's own CPU per sandbox, and the proportional
// memory (PSS) of one waiting sandbox's processes:
//
//	go test -run '^$' -bench Supervisor -benchtime 100x ./internal/providers/namespace/
func BenchmarkSupervisor(b *testing.B) {
	testenv.NeedRoot(b)
	small := smallSupervisor(b)
	dir := b.TempDir()
	worker, err := testenv.BuildProgram(dir, "cmd/worker")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, exe string
		zygote    bool
	}{{"worker-binary", worker, false}, {"small", small, false}, {"small-zygote", small, true}} {
		p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: b.TempDir(), UIDBase: testUIDBase,
			UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), Supervisor: c.exe, NoZygote: !c.zygote})
		if err != nil {
			testenv.Missing(b, "namespace provider: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		e := providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(b), "")}
		b.Run(c.name, func(b *testing.B) {
			pss := waitingPSS(b, e)
			z := namespace.ZygotePids(p)["python3"]
			z0 := procCPU(z)
			providertest.BenchSteps(b, e, "python3", "pass")
			b.ReportMetric(float64(pss)/1024, "KiB-pss-waiting") // after BenchSteps: its timer reset drops metrics
			if z != 0 {
				b.ReportMetric(float64((procCPU(z)-z0).Microseconds())/1000/float64(b.N), "ms-cpu-zygote")
			}
		})
	}
}

// waitingPSS is the proportional set size of the processes of one waiting python3 sandbox.
func waitingPSS(b *testing.B, e providertest.Env) int64 {
	sb, err := e.Provider.Create(b.Context(), providertest.Shape(e.Profiles["python3"]))
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.WithoutCancel(b.Context()))
	dirs := sandboxCgroups("runfleet-test", sb.ID())
	if len(dirs) == 0 {
		b.Fatalf("no cgroup of sandbox %s", sb.ID())
	}
	dir := dirs[0]
	for _, d := range dirs {
		if strings.Contains(d, "/memory/") {
			dir = d // v1: every hierarchy lists the same processes
		}
	}
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pss int64
	for _, pid := range strings.Fields(string(procs)) {
		rollup, _ := os.ReadFile(filepath.Join("/proc", pid, "smaps_rollup"))
		for _, line := range strings.Split(string(rollup), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				pss += kb << 10
			}
		}
	}
	return pss
}

// procCPU is the user and system CPU time of process pid so far, 0 when it is not running.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// TestKilledWorker: a sandbox never outlives its SIGKILLed worker by more than 2 s (G5), although
// its program runs under another uid, which clears a parent-death signal.
func TestKilledWorker(t *testing.T) {
	testenv.NeedRoot(t)
	cg := "runfleet-test-g5"
	providertest.RunKilledWorker(t, func(t *testing.T, id string) string {
		var procs []string
		for _, dir := range sandboxCgroups(cg, id) {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			procs = append(procs, strings.Fields(string(b))...)
		}
		if len(procs) == 0 {
			return ""
		}
		return "processes " + strings.Join(procs, " ")
	}, "RUNFLEET_TEST_CGROUP="+cg, "RUNFLEET_TEST_STATE="+t.TempDir(), "RUNFLEET_TEST_UID_LOCKS="+t.TempDir())
	// The next worker removes what the dead one left in the cgroup tree.
	p := newProvider(t, cg)
	if p.Reaped == 0 {
		t.Errorf("Reaped = 0, want the dead worker's cgroups removed")
	}
}

// TestUIDsUniqueAcrossWorkers: two worker processes on one host, each running jobs in parallel,
// never run two programs under one uid at the same time.
func TestUIDsUniqueAcrossWorkers(t *testing.T) {
	testenv.NeedRoot(t)
	locks := t.TempDir()
	got := providertest.RunUIDWorkers(t, "RUNFLEET_TEST_CGROUP=runfleet-test-uids", "RUNFLEET_TEST_STATE="+t.TempDir(), "RUNFLEET_TEST_UID_LOCKS="+locks)
	rounds := map[int]map[int]bool{} // round → uids
	for i, a := range got {
		if rounds[a.Round] == nil {
			rounds[a.Round] = map[int]bool{}
		}
		rounds[a.Round][a.UID] = true
		for _, b := range got[i+1:] {
			if a.UID == b.UID && a.Start < b.End && b.Start < a.End {
				t.Errorf("uid %d ran in workers %d and %d at once: [%d, %d] and [%d, %d]", a.UID, a.Worker, b.Worker, a.Start, a.End, b.Start, b.End)
			}
		}
	}
	// The sandboxes of a round all existed at once, so each held its own uid.
	for r, uids := range rounds {
		if len(uids) != 2*providertest.ChildParallel {
			t.Errorf("round %d: %d distinct uids for %d sandboxes alive at once", r, len(uids), 2*providertest.ChildParallel)
		}
	}
	// Every uid was given back: no lock is held.
	files, _ := filepath.Glob(filepath.Join(locks, "*"))
	if len(files) == 0 {
		t.Fatalf("no uid lock files in %s", locks)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Errorf("uid lock %s still held after both workers ended: %v", filepath.Base(name), err)
		}
		f.Close()
	}
}

// BenchmarkCycle: go test -bench Cycle -benchtime 50x ./internal/providers/namespace/
func BenchmarkCycle(b *testing.B) {
	p := newProvider(b, "runfleet-test")
	providertest.BenchCycle(b, providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(b), "")},
		[]string{"/usr/bin/python3", "-I", "-c", "pass"})
}

// BenchmarkFilter compares the allowlist filter with the denylist it replaced, in one run: a
// trivial job (the cost at start) and one of 200k system calls (the cost per call).
// go test -run '^$' -bench Filter -benchtime 40x ./internal/providers/namespace/
func BenchmarkFilter(b *testing.B) {
	allow := newProvider(b, "runfleet-test")
	deny := newProvider(b, "runfleet-test")
	old, err := namespace.DenylistFilter()
	if err != nil {
		b.Fatal(err)
	}
	deny.SetFilter(old)
	profiles := profile.Builtin(testenv.RootFS(b), "")
	for _, job := range []struct{ name, code string }{
		{"pass", "pass"},
		{"getppid-200k", "import os\nfor _ in range(200000): os.getppid()"},
	} {
		b.Run(job.name+"/denylist", func(b *testing.B) {
			providertest.BenchJob(b, providertest.Env{Provider: deny, Profiles: profiles}, job.code)
		})
		b.Run(job.name+"/allowlist", func(b *testing.B) {
			providertest.BenchJob(b, providertest.Env{Provider: allow, Profiles: profiles}, job.code)
		})
	}
}

// TestWorkerBinaryInvisible: with the default root (the host's /usr), a sandbox sees neither the
// executable of the worker that made it, wherever it lies, nor anything under /usr/local.
func TestWorkerBinaryInvisible(t *testing.T) {
	testenv.NeedRoot(t)
	for _, dir := range []string{"/usr/local/lib", "/usr/lib"} {
		t.Run(dir, func(t *testing.T) {
			d, err := os.MkdirTemp(dir, "runfleet-test-")
			if err != nil {
				t.Skipf("cannot write under %s: %v", dir, err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			providertest.RunExeInvisible(t, filepath.Join(d, "worker"), "RUNFLEET_TEST_ROOTFS=",
				"RUNFLEET_TEST_CGROUP=runfleet-test", "RUNFLEET_TEST_STATE="+t.TempDir(), "RUNFLEET_TEST_UID_LOCKS="+t.TempDir())
		})
	}
}

// TestFailedDestroyReaped: a Destroy that fails leaves the sandbox to the provider's reaper, which
// finishes it; the uid is given back once no process of it remains.
func TestFailedDestroyReaped(t *testing.T) {
	testenv.NeedRoot(t)
	state := t.TempDir()
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: state, UIDBase: testUIDBase,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids")})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	defer p.Close()
	sb, err := p.Create(t.Context(), providertest.Shape(profile.Builtin(testenv.RootFS(t), "")["python3"]))
	if err != nil {
		t.Fatal(err)
	}
	// A file in its mount point makes the removal of the mount point fail.
	blocker := filepath.Join(state, sb.ID(), "blocker")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err == nil {
		t.Fatal("Destroy() = nil with its mount point not empty, want an error")
	}
	if n, err := p.Reap(t.Context()); n != 0 || err == nil {
		t.Errorf("Reap() = %d, %v while the blocker stays; want 0 and an error", n, err)
	}
	os.Remove(blocker)
	if n, err := p.Reap(t.Context()); n != 1 || err != nil {
		t.Errorf("Reap() = %d, %v; want 1 sandbox finished", n, err)
	}
	if left := sandboxCgroups("runfleet-test", sb.ID()); len(left) > 0 {
		t.Errorf("after Reap, left on the host: %v", left)
	}
	if _, err := os.Stat(filepath.Join(state, sb.ID())); !os.IsNotExist(err) {
		t.Errorf("mount point still there after Reap: %v", err)
	}
}

// TestDataProfile: the python3-data profile of a root fs with numpy, pandas and matplotlib draws
// a plot that is read back from /workspace.
func TestDataProfile(t *testing.T) {
	testenv.NeedRoot(t)
	providertest.RunDataProfile(t, providertest.Env{Provider: newProvider(t, "runfleet-test"), Profiles: profile.Builtin(testenv.RootFS(t), "")})
}

// BenchmarkSteps: each step of a sandbox's life, and its CPU time, per language.
// go test -run '^$' -bench Steps -benchtime 100x ./internal/providers/namespace/
func BenchmarkSteps(b *testing.B) {
	e := providertest.Env{Provider: newProvider(b, "runfleet-test"), Profiles: profile.Builtin(testenv.RootFS(b), "")}
	b.Run("python3", func(b *testing.B) { providertest.BenchSteps(b, e, "python3", "pass") })
	b.Run("nodejs", func(b *testing.B) { providertest.BenchSteps(b, e, "nodejs", "0") })
}

// TestAssignEnded: a waiting sandbox that ended (killed while it waited) refuses its assignment
// with ErrEnded, so that no job runs and fails in it, and is destroyed without leftovers.
func TestAssignEnded(t *testing.T) {
	p := newProvider(t, "runfleet-test")
	sb, err := p.Create(t.Context(), providertest.Shape(profile.Builtin(testenv.RootFS(t), "")["python3"]))
	if err != nil {
		t.Fatal(err)
	}
	<-namespace.KillWaiting(sb)
	if err := sb.Assign(t.Context(), providertest.Job("ended")); !errors.Is(err, sandbox.ErrEnded) {
		t.Errorf("Assign() error = %v, want ErrEnded", err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Errorf("Destroy() error = %v", err)
	}
	if left := sandboxCgroups("runfleet-test", sb.ID()); len(left) > 0 {
		t.Errorf("after Destroy, left on the host: %v", left)
	}
}

// TestMachineryOutOfStderr: a supervisor that crashes while the program runs (here: SIGQUIT, on
// which the Go runtime dumps its goroutines) writes nothing into the job's stderr.
func TestMachineryOutOfStderr(t *testing.T) {
	testenv.NeedRoot(t)
	e := providertest.Env{Provider: newProvider(t, "runfleet-test"), Profiles: profile.Builtin(testenv.RootFS(t), "")}
	providertest.RunMachineryOutOfStderr(t, e, func(t *testing.T, sb sandbox.Sandbox) {
		if err := namespace.SignalSupervisor(sb, syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWorkersReapTogether: workers of one host that start at once reap the same dead worker's
// cgroups side by side; a cgroup another one removed while this one read it is gone, not an
// error that stops the worker from starting.
func TestWorkersReapTogether(t *testing.T) {
	cg := "runfleet-test-reapers"
	live := newProvider(t, cg)
	var parents []string
	for _, dir := range sandboxCgroups(cg, "") {
		if strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("p%d-", os.Getpid())) {
			parents = append(parents, filepath.Dir(dir))
		}
	}
	if len(parents) == 0 {
		t.Fatalf("no instance cgroup of this process under %s", cg)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, parent := range parents {
		for i := range 100 {
			if err := os.MkdirAll(filepath.Join(parent, fmt.Sprintf("p%d-1", dead.Process.Pid), fmt.Sprintf("ns-%d", i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			p, err := namespace.New(namespace.Options{CgroupName: cg, StateDir: t.TempDir(), UIDBase: testUIDBase,
				UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids")})
			if err == nil {
				err = p.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a worker starting beside others: %v", err)
		}
	}
	for _, parent := range parents {
		if left, _ := filepath.Glob(filepath.Join(parent, fmt.Sprintf("p%d-1", dead.Process.Pid))); len(left) > 0 {
			t.Errorf("the dead worker's cgroups are left: %v", left)
		}
	}
}
