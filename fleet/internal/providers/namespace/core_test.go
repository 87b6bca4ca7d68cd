package namespace_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestPipeCorePatternNotRun: with a pipe core_pattern the kernel runs its helper as root, outside
// every namespace and cgroup of the sandbox, for each crash it dumps, even at RLIMIT_CORE 0; it
// skips a pipe only at RLIMIT_CORE 1, which the supervisor sets and the filter keeps (issue 39).
// The test sets a machine-wide pattern, so it runs only in the cgroup v2 guest (`make
// test-cgroup2`), whose init sets RUNFLEET_VMTEST_GUEST, never on the host.
func TestPipeCorePatternNotRun(t *testing.T) {
	if os.Getenv("RUNFLEET_VMTEST_GUEST") != "1" {
		t.Skip("sets kernel.core_pattern, a machine-wide setting: runs in the cgroup v2 guest only (make test-cgroup2)")
	}
	testenv.NeedRoot(t)
	dir := t.TempDir()
	setSysctl(t, "/proc/sys/kernel/core_pattern", "|/usr/bin/touch "+filepath.Join(dir, "cored-%p"))
	// The kernel then waits for the helper before the crashed process is reaped: no polling.
	setSysctl(t, "/proc/sys/kernel/core_pipe_limit", "4")
	helperRuns := func() int {
		m, err := filepath.Glob(filepath.Join(dir, "cored-*"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}

	// The control: a crash outside any sandbox, cores allowed, runs the helper here.
	var exit *exec.ExitError
	if err := exec.Command("sh", "-c", "ulimit -c unlimited; kill -SEGV $$").Run(); !errors.As(err, &exit) {
		t.Fatalf("the control crash: %v, want it killed by SIGSEGV", err)
	}
	if n := helperRuns(); n != 1 {
		t.Fatalf("the control crash ran the pipe helper %d times, want 1: the pattern does not work here", n)
	}

	e := providertest.Env{Provider: newProvider(t, "runfleet-test"), Profiles: profile.Builtin(testenv.RootFS(t), "")}
	r := providertest.Exec(t.Context(), t, e, job.Request{Language: "python3", Code: `import os, resource, signal
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("raised", flush=True)
except (OSError, ValueError) as e:
    print("refused", e, flush=True)
os.kill(os.getpid(), signal.SIGSEGV)`}, nil)
	if !strings.Contains(r.Stdout, "refused") {
		t.Errorf("the job raised RLIMIT_CORE: stdout %q", r.Stdout)
	}
	if r.Exit.Signal != "SIGSEGV" {
		t.Errorf("the job was not killed by its SIGSEGV: %+v", r.Exit)
	}
	if n := helperRuns(); n != 1 {
		t.Errorf("the sandbox's crash ran the host's pipe helper (%d runs, want the control's 1)", n)
	}
}

// setSysctl writes value to the sysctl file path and restores the old value when t ends.
func setSysctl(t *testing.T, path, value string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	})
}
