package cgstat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// envHog makes the test binary a process that joins the cgroup named in it and allocates until
// it is killed.
const envHog = "RUNFLEET_CGSTAT_HOG"

func TestOOMHog(t *testing.T) {
	procs := os.Getenv(envHog)
	if procs == "" {
		t.Skip("the memory hog of TestMeterSeesAChildsOOM, run by it")
	}
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatal(err)
	}
	var held [][]byte
	for {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		held = append(held, b)
	}
}

// TestMeterSeesAChildsOOM: on cgroup v1 a memory limit on a parent cgroup whose child's process
// is OOM-killed counts the kill in the child alone (its oom_kill), and the child's cgroup may be
// gone by the time the parent is read (Docker removes a container's when gVisor's Sentry is
// killed). A meter of the parent, marked before, still reports the OOM.
func TestMeterSeesAChildsOOM(t *testing.T) {
	testenv.NeedRoot(t)
	var fs unix.Statfs_t
	root := "/sys/fs/cgroup/memory"
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP_SUPER_MAGIC {
		t.Skip("needs a cgroup v1 memory hierarchy at " + root + " (on v2 memory.events counts a child's kill in its parents)")
	}
	parent := filepath.Join(root, fmt.Sprintf("runfleet-cgstat-test-%d", os.Getpid()))
	child := filepath.Join(parent, "c")
	for _, d := range []string{parent, child} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = unix.Rmdir(child)
		_ = unix.Rmdir(parent)
	})
	if err := os.WriteFile(filepath.Join(parent, "memory.limit_in_bytes"), []byte(strconv.Itoa(32<<20)), 0); err != nil {
		t.Fatal(err)
	}
	m := NewV1(parent, t.TempDir())
	m.Mark()
	defer m.Close()
	if m.Read().OOM {
		t.Fatal("OOM reported before anything ran")
	}

	hog := exec.Command(os.Args[0], "-test.run=^TestOOMHog$")
	hog.Env = append(os.Environ(), envHog+"="+filepath.Join(child, "cgroup.procs"))
	err := hog.Run()
	if ws, ok := hog.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want killed by the OOM killer", err)
	}
	if n, _ := Keyed(filepath.Join(parent, "memory.oom_control"), "oom_kill"); n != 0 {
		t.Logf("the parent's oom_kill counts the child's kill (%d): this kernel counts them hierarchically", n)
	}
	if err := unix.Rmdir(child); err != nil {
		t.Fatal(err)
	}
	if !m.Read().OOM {
		t.Error("Read().OOM = false after the child's process was OOM-killed and its cgroup removed")
	}
	if !m.Read().OOM {
		t.Error("a second Read() forgot the OOM")
	}
}
