package namespace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/sandbox/cgstat"
)

// limits are what a cgroup enforces.
type limits struct {
	memory int64
	pids   int64
	cpus   float64
}

// cgroups makes one cgroup per sandbox, on whichever hierarchy the host has.
type cgroups interface {
	create(name string, l limits) (cgroup, error)
	version() string
	// dirs are this instance's parent directories, one per hierarchy.
	dirs() []string
}

type cgroup interface {
	add(pid int) error
	// open returns the cgroup's directory for clone3's CLONE_INTO_CGROUP (v2), or nil (v1).
	open() (*os.File, error)
	// procs opens the cgroup.procs files, one per hierarchy, for a process to write "0" to.
	procs() ([]*os.File, error)
	// set replaces the limits: a waiting sandbox's by its job's.
	set(l limits) error
	// mark starts the measure that stats reports: the job's use, not the waiting sandbox's.
	mark()
	stats() cgstat.Stats
	// kill kills every process in the cgroup and waits until it is empty.
	kill() error
	remove() error
}

func detectCgroups(root, parent string) (cgroups, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("cgroups at %s: %w", root, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return newCgroupsV2(root, parent)
	}
	return newCgroupsV1(root, parent)
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0o644)
}

// killAll kills the processes listed in procs until the list stays empty.
func killAll(procs string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(procs)
		// ENODEV: the cgroup was removed while it was read, by another worker of this host
		// reaping the same dead worker's sandboxes.
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return err
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			return nil
		}
		for _, f := range fields {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d processes survive SIGKILL", procs, len(fields))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rmdirRetry removes a cgroup directory; the kernel refuses while exiting tasks are still
// accounted to it, which lasts a few milliseconds after they were reaped.
func rmdirRetry(dir string) error {
	var err error
	for range 200 {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// cgroupsV1 places each sandbox in the memory, pids, cpu and cpuacct hierarchies.
type cgroupsV1 struct {
	dir map[string]string // controller → <mount>/<parent>
}

var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

func newCgroupsV1(root, parent string) (*cgroupsV1, error) {
	c := &cgroupsV1{dir: map[string]string{}}
	for _, ctrl := range v1Controllers {
		mount := filepath.Join(root, ctrl)
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s controller is not mounted at %s: %w", ctrl, mount, sandbox.ErrUnsupported)
		}
		dir := filepath.Join(mount, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", ctrl, err)
		}
		c.dir[ctrl] = dir
	}
	return c, nil
}

func (c *cgroupsV1) version() string { return "v1" }

func (c *cgroupsV1) dirs() []string {
	out := make([]string, 0, len(c.dir))
	for _, d := range c.dir {
		out = append(out, d)
	}
	return out
}

func (c *cgroupsV1) create(name string, l limits) (cgroup, error) {
	g := &cgroupV1{dirs: map[string]string{}, meter: cgstat.NewV1(filepath.Join(c.dir["memory"], name), filepath.Join(c.dir["cpuacct"], name))}
	for _, ctrl := range v1Controllers {
		dir := filepath.Join(c.dir[ctrl], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			_ = g.remove()
			return nil, fmt.Errorf("cgroup %s: %w", ctrl, err)
		}
		g.dirs[ctrl] = dir
	}
	if err := g.set(l); err != nil {
		_ = g.remove()
		return nil, err
	}
	return g, nil
}

type cgroupV1 struct {
	dirs  map[string]string
	meter *cgstat.Meter
}

// exists reports whether the file name exists.
func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// set writes l. memory.memsw.limit_in_bytes may never be below memory.limit_in_bytes, so a
// raise writes memsw first and a cut writes it last.
func (g *cgroupV1) set(l limits) error {
	mem := g.dirs["memory"]
	memory := [2]string{filepath.Join(mem, "memory.limit_in_bytes"), strconv.FormatInt(l.memory, 10)}
	settings := [][2]string{memory, {filepath.Join(mem, "memory.swappiness"), "0"}}
	memsw := filepath.Join(mem, "memory.memsw.limit_in_bytes")
	if cur, err := os.ReadFile(memsw); err == nil {
		sw := [2]string{memsw, strconv.FormatInt(l.memory, 10)}
		if n, _ := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64); n < l.memory {
			settings = append([][2]string{sw}, settings...)
		} else {
			settings = append(settings, sw)
		}
	}
	// v1 charges TCP socket buffers to a cgroup only once its kmem.tcp limit is written (v2
	// charges them to memory.max): unwritten, a job's sockets take from the host's tcp_mem, which
	// every socket of the host shares, the worker's own included.
	if tcp := filepath.Join(mem, "memory.kmem.tcp.limit_in_bytes"); exists(tcp) {
		settings = append(settings, [2]string{tcp, strconv.FormatInt(l.memory, 10)})
	}
	quota := "-1"
	if l.cpus > 0 {
		quota = strconv.FormatInt(int64(l.cpus*100000), 10)
	}
	settings = append(settings,
		[2]string{filepath.Join(g.dirs["pids"], "pids.max"), strconv.FormatInt(l.pids, 10)},
		[2]string{filepath.Join(g.dirs["cpu"], "cpu.cfs_period_us"), "100000"},
		[2]string{filepath.Join(g.dirs["cpu"], "cpu.cfs_quota_us"), quota})
	for _, s := range settings {
		if err := writeFile(s[0], s[1]); err != nil {
			return fmt.Errorf("set %s: %w", filepath.Base(s[0]), err)
		}
	}
	return nil
}

func (g *cgroupV1) add(pid int) error {
	for _, ctrl := range v1Controllers {
		if err := writeFile(filepath.Join(g.dirs[ctrl], "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("join cgroup %s: %w", ctrl, err)
		}
	}
	return nil
}

func (g *cgroupV1) open() (*os.File, error) { return nil, nil }

func (g *cgroupV1) procs() ([]*os.File, error) {
	var out []*os.File
	for _, ctrl := range v1Controllers {
		f, err := os.OpenFile(filepath.Join(g.dirs[ctrl], "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		out = append(out, f)
	}
	return out, nil
}

func (g *cgroupV1) mark() { g.meter.Mark() }

func (g *cgroupV1) stats() cgstat.Stats { return g.meter.Read() }

func (g *cgroupV1) kill() error {
	return killAll(filepath.Join(g.dirs["pids"], "cgroup.procs"))
}

func (g *cgroupV1) remove() error {
	errs := []error{g.meter.Close()}
	for _, dir := range g.dirs {
		errs = append(errs, rmdirRetry(dir))
	}
	return errors.Join(errs...)
}

// cgroupsV2 places each sandbox in a child of the worker's own cgroup. The worker moves itself
// into a leaf first, because cgroup v2 enables controllers for children only of a cgroup that
// holds no processes itself.
type cgroupsV2 struct {
	dir       string
	cloneInto bool // the kernel has CLONE_INTO_CGROUP (5.7)
}

func newCgroupsV2(root, parent string) (*cgroupsV2, error) {
	own, err := ownCgroupV2()
	if err != nil {
		return nil, err
	}
	// A worker already moved into its leaf counts from the leaf's parent.
	own = strings.TrimSuffix(own, "/"+workerLeaf)
	base := filepath.Join(root, own)
	ctrls, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 at %s: %w", base, err)
	}
	for _, need := range []string{"memory", "pids", "cpu"} {
		if !slices.Contains(strings.Fields(string(ctrls)), need) {
			return nil, fmt.Errorf("cgroup v2 controller %s is not delegated to %s: %w", need, base, sandbox.ErrUnsupported)
		}
	}
	// Only the root cgroup may hold processes and hand controllers on at once; a container's
	// cgroup namespace shows its own cgroup as "/" too, and only the root lacks cgroup.type.
	if _, err := os.Stat(filepath.Join(base, "cgroup.type")); err == nil {
		leaf := filepath.Join(base, workerLeaf)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2 leaf: %w", err)
		}
		if err := moveProcs(base, leaf); err != nil {
			return nil, err
		}
	}
	// Every cgroup from base down to the sandboxes' parent hands the controllers on.
	dir := base
	for _, part := range append([]string{""}, strings.Split(parent, "/")...) {
		dir = filepath.Join(dir, part)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids +cpu"); err != nil {
			return nil, fmt.Errorf("enable controllers in %s: %w", dir, err)
		}
	}
	return &cgroupsV2{dir: dir, cloneInto: kernelAtLeast(5, 7) && clone3Allowed()}, nil
}

// moveProcs moves every process of the cgroup from into the cgroup to: a delegated cgroup (a
// systemd service with Delegate=yes, a container's) often holds more than the worker (a shell that
// started it, a sidecar, a test's parent process), and any process left in it keeps it from
// handing controllers on (EBUSY). A process that exits meanwhile is passed over.
func moveProcs(from, to string) error {
	b, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup v2 processes of %s: %w", from, err)
	}
	pids := append(strings.Fields(string(b)), strconv.Itoa(os.Getpid()))
	for _, pid := range pids {
		err := writeFile(filepath.Join(to, "cgroup.procs"), pid)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("move process %s into %s: %w", pid, to, err)
		}
	}
	return nil
}

// workerLeaf is the cgroup v2 leaf the worker moves itself into: cgroup v2 enables controllers
// for children only of a cgroup that holds no processes itself.
const workerLeaf = "runfleet-worker"

func ownCgroupV2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 entry in /proc/self/cgroup: %w", sandbox.ErrUnsupported)
}

func (c *cgroupsV2) version() string { return "v2" }

func (c *cgroupsV2) dirs() []string { return []string{c.dir} }

func (c *cgroupsV2) create(name string, l limits) (cgroup, error) {
	dir := filepath.Join(c.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	g := &cgroupV2{dir: dir, meter: cgstat.NewV2(dir), cloneInto: c.cloneInto}
	if err := g.set(l); err != nil {
		_ = g.remove()
		return nil, err
	}
	return g, nil
}

type cgroupV2 struct {
	dir       string
	meter     *cgstat.Meter
	cloneInto bool
}

func (g *cgroupV2) set(l limits) error {
	cpu := "max 100000"
	if l.cpus > 0 {
		cpu = fmt.Sprintf("%d 100000", int64(l.cpus*100000))
	}
	for _, s := range [][2]string{
		{"memory.max", strconv.FormatInt(l.memory, 10)},
		{"memory.swap.max", "0"},
		{"pids.max", strconv.FormatInt(l.pids, 10)},
		{"cpu.max", cpu},
	} {
		if err := writeFile(filepath.Join(g.dir, s[0]), s[1]); err != nil && !(s[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set %s: %w", s[0], err)
		}
	}
	return nil
}

func (g *cgroupV2) add(pid int) error {
	return writeFile(filepath.Join(g.dir, "cgroup.procs"), strconv.Itoa(pid))
}

// open: a process cloned into the cgroup is never outside it, and the kernel need not move it
// (a move takes a lock that every fork of the host waits on).
func (g *cgroupV2) open() (*os.File, error) {
	if !g.cloneInto {
		return nil, nil
	}
	f, err := os.OpenFile(g.dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return f, nil
}

func (g *cgroupV2) procs() ([]*os.File, error) {
	f, err := os.OpenFile(filepath.Join(g.dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return []*os.File{f}, nil
}

// mark resets memory.peak on Linux 6.12 and later; before, a job's peak includes its sandbox's start.
func (g *cgroupV2) mark() { g.meter.Mark() }

func (g *cgroupV2) stats() cgstat.Stats { return g.meter.Read() }

func (g *cgroupV2) kill() error {
	_ = writeFile(filepath.Join(g.dir, "cgroup.kill"), "1")
	return killAll(filepath.Join(g.dir, "cgroup.procs"))
}

func (g *cgroupV2) remove() error { return errors.Join(g.meter.Close(), rmdirRetry(g.dir)) }

// instanceDir names one provider's parent cgroup: the process id tells a reaper whether its
// owner still lives.
func instanceDir(pid int, n int64) string { return fmt.Sprintf("p%d-%d", pid, n) }

// removeTree kills what is left in dir's child cgroups and removes them and dir.
func removeTree(dir string) error {
	children, _ := os.ReadDir(dir)
	var errs []error
	for _, c := range children {
		if !c.IsDir() {
			continue
		}
		sub := filepath.Join(dir, c.Name())
		errs = append(errs, killAll(filepath.Join(sub, "cgroup.procs")), rmdirRetry(sub))
	}
	errs = append(errs, rmdirRetry(dir))
	return errors.Join(errs...)
}

// reapDead removes the instance cgroups under each parent whose owning process is gone: what a
// crashed worker's sandboxes left (the kernel killed their processes with the worker).
func reapDead(parents []string) (int, error) {
	n := 0
	var errs []error
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			var pid int
			var k int64
			if _, err := fmt.Sscanf(e.Name(), "p%d-%d", &pid, &k); err != nil || !e.IsDir() {
				continue
			}
			if syscall.Kill(pid, 0) == nil || pid == os.Getpid() {
				continue
			}
			if err := removeTree(filepath.Join(parent, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// clone3Allowed: a seccomp filter around the worker (Docker's default profile) may answer clone3
// with ENOSYS on a kernel that has it, and a sandbox cloned into its cgroup would then never start.
// clone3 with no arguments creates nothing; where it is allowed it fails with EINVAL.
func clone3Allowed() bool {
	_, _, errno := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	return errno != unix.ENOSYS
}

// kernelAtLeast reports whether the running kernel's release is major.minor or later.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
