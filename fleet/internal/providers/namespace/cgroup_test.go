package namespace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestClonedIntoCgroup: on cgroup v2 a sandbox's supervisor is cloned into its cgroup (clone3,
// CLONE_INTO_CGROUP), so its first instruction already runs under the limits and the kernel never
// moves it. The child reads its own cgroup first thing: a move after the start would show the
// parent's. cgroup v1 has no such clone; `make test-cgroup2` runs this in a cgroup v2 guest.
func TestClonedIntoCgroup(t *testing.T) {
	cgs, err := detectCgroups("/sys/fs/cgroup", filepath.Join("runfleet-test-clone", strconv.Itoa(os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range cgs.dirs() {
			_ = os.Remove(d)
			_ = os.Remove(filepath.Dir(d))
		}
	})
	if cgs.version() != "v2" {
		t.Skip("cgroup v1 has no CLONE_INTO_CGROUP: its sandboxes are moved in (make test-cgroup2 runs this on v2)")
	}
	g, err := cgs.create("probe", limits{memory: 64 << 20, pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.remove() })
	into, err := g.open()
	if err != nil {
		t.Fatal(err)
	}
	if into == nil {
		t.Fatal("open() = nil on cgroup v2: the sandbox would be moved in after its start")
	}
	defer into.Close()
	cmd := exec.Command("cat", "/proc/self/cgroup")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(into.Fd())}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := strings.CutPrefix(g.(*cgroupV2).dir, "/sys/fs/cgroup")
	if got := strings.TrimSpace(string(out)); got != "0::"+rel {
		t.Errorf("the child's cgroup at its start = %q, want %q", got, "0::"+rel)
	}
}
