package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox/cgstat"
)

// cgroupLayout gives each container a parent cgroup of its own, <fleet>-docker/<sandbox name>,
// under the cgroupfs driver; the container's cgroup is <parent>/<container id>. Docker removes
// the container's cgroup when it exits; the parent keeps the hierarchical counters until the
// provider removes it. The systemd driver takes only slices as parents: nothing is measured there.
type cgroupLayout struct {
	root    string    // where the host mounts cgroups
	version string    // "1" or "2"
	base    string    // the sandboxes' parents' parent, relative to a hierarchy's root; "" measures nothing
	meters  *sync.Map // sandbox name → *cgstat.Meter marked when its job was assigned
}

func newCgroupLayout(root, driver, version, fleet string) cgroupLayout {
	if driver != "cgroupfs" {
		return cgroupLayout{}
	}
	return cgroupLayout{root: root, version: version, base: fleet + "-docker", meters: &sync.Map{}}
}

func (l cgroupLayout) measures() bool { return l.base != "" }

// parent is the CgroupParent of the sandbox name, "" for Docker's default.
func (l cgroupLayout) parent(name string) string {
	if !l.measures() {
		return ""
	}
	return "/" + l.base + "/" + name
}

// dirs are the sandbox's parent cgroups that exist: one per v1 hierarchy, or the v2 one.
func (l cgroupLayout) dirs(name string) []string {
	if !l.measures() {
		return nil
	}
	if l.version == "2" {
		return []string{filepath.Join(l.root, l.base, name)}
	}
	out, _ := filepath.Glob(filepath.Join(l.root, "*", l.base, name))
	return out
}

func (l cgroupLayout) meter(name string) *cgstat.Meter {
	if l.version == "2" {
		return cgstat.NewV2(filepath.Join(l.root, l.base, name))
	}
	return cgstat.NewV1(filepath.Join(l.root, "memory", l.base, name), filepath.Join(l.root, "cpuacct", l.base, name))
}

// mark starts the measure of the sandbox's job: what the container used starting and waiting
// is not the job's (see cgstat.Meter.Mark for where the memory peak cannot restart).
func (l cgroupLayout) mark(name string) {
	if !l.measures() {
		return
	}
	m := l.meter(name)
	m.Mark()
	if old, loaded := l.meters.Swap(name, m); loaded {
		_ = old.(*cgstat.Meter).Close()
	}
}

// chargeSockets makes cgroup v1 charge the TCP socket buffers of container id (sandbox name) to
// it, up to limit: v1 charges them only in a cgroup whose own kmem.tcp limit was written (a
// parent's does not turn it on), and Docker's API no longer sets it. Written at assignment, before
// the job makes a socket; v2 charges sockets to memory.max by itself.
func (l cgroupLayout) chargeSockets(name, id string, limit int64) error {
	if !l.measures() || l.version != "1" {
		return nil
	}
	f := filepath.Join(l.root, "memory", l.base, name, id, "memory.kmem.tcp.limit_in_bytes")
	if _, err := os.Stat(filepath.Dir(f)); err != nil {
		return fmt.Errorf("charge sockets: %w", err)
	}
	if err := os.WriteFile(f, []byte(strconv.FormatInt(limit, 10)), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("charge sockets: %w", err)
	}
	return nil
}

// update writes res into the cgroups of container id (sandbox name), for a runtime that cannot
// update them: pids and the CPU quota into the container's own, memory (and swap, the same) into
// its parent, with the container's own memory limit lifted. The memory limit sits in the parent so
// that an OOM is seen where stats reads it (v2's memory.events, v1's OOM notification, see
// cgstat.Meter): a runtime whose whole container the kill ends (gVisor's Sentry holds all of the
// job's memory) leaves no cgroup of its own to read it from.
func (l cgroupLayout) update(name, id string, res container.Resources) error {
	if !l.measures() {
		return fmt.Errorf("update limits: needs the cgroupfs driver")
	}
	mem, pids := strconv.FormatInt(res.Memory, 10), strconv.FormatInt(*res.PidsLimit, 10)
	quota, period := "-1", int64(100000)
	if res.NanoCPUs > 0 {
		quota = strconv.FormatInt(res.NanoCPUs*period/1e9, 10)
	}
	type write struct{ file, value string }
	var writes []write
	if l.version == "2" {
		parent := filepath.Join(l.root, l.base, name)
		dir := filepath.Join(parent, id)
		cpu := "max " + strconv.FormatInt(period, 10)
		if quota != "-1" {
			cpu = quota + " " + strconv.FormatInt(period, 10)
		}
		writes = []write{{filepath.Join(parent, "memory.max"), mem}, {filepath.Join(parent, "memory.swap.max"), "0"},
			{filepath.Join(dir, "memory.max"), "max"}, {filepath.Join(dir, "pids.max"), pids}, {filepath.Join(dir, "cpu.max"), cpu}}
	} else {
		// v1 keeps memory.limit_in_bytes at or below memory.memsw.limit_in_bytes: a raise writes
		// memsw first, a cut the limit first.
		memory := func(dir, v string, raise bool) []write {
			limit, memsw := write{filepath.Join(dir, "memory.limit_in_bytes"), v}, write{filepath.Join(dir, "memory.memsw.limit_in_bytes"), v}
			if _, err := os.Stat(memsw.file); err != nil {
				return []write{limit}
			}
			if raise {
				return []write{memsw, limit}
			}
			return []write{limit, memsw}
		}
		parent := filepath.Join(l.root, "memory", l.base, name)
		cur, _ := os.ReadFile(filepath.Join(parent, "memory.limit_in_bytes"))
		writes = append(memory(parent, mem, parseInt(cur) < res.Memory), memory(filepath.Join(parent, id), "-1", true)...)
		writes = append(writes, write{filepath.Join(l.root, "pids", l.base, name, id, "pids.max"), pids},
			write{filepath.Join(l.root, "cpu", l.base, name, id, "cpu.cfs_quota_us"), quota})
	}
	for _, w := range writes {
		if err := os.WriteFile(w.file, []byte(w.value), 0); err != nil {
			return fmt.Errorf("update limits: %w", err)
		}
	}
	return nil
}

func parseInt(b []byte) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// stats reads the sandbox's counters since mark: on v2 cpu.stat and memory.peak, on v1
// cpuacct.usage and memory.max_usage_in_bytes.
func (l cgroupLayout) stats(name string) cgstat.Stats {
	if !l.measures() {
		return cgstat.Stats{}
	}
	if m, ok := l.meters.Load(name); ok {
		return m.(*cgstat.Meter).Read()
	}
	return l.meter(name).Read()
}

// remove removes the sandbox's parent cgroups; it fails while a container's cgroup is in them.
func (l cgroupLayout) remove(name string) error {
	var errs []error
	if !l.measures() {
		return nil
	}
	if m, ok := l.meters.LoadAndDelete(name); ok {
		errs = append(errs, m.(*cgstat.Meter).Close())
	}
	for _, d := range l.dirs(name) {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// removeEmpty removes every sandbox parent but those live reports, that no longer holds a
// container's cgroup.
func (l cgroupLayout) removeEmpty(live func(name string) bool) error {
	if !l.measures() {
		return nil
	}
	pattern := filepath.Join(l.root, "*", l.base, "*")
	if l.version == "2" {
		pattern = filepath.Join(l.root, l.base, "*")
	}
	dirs, _ := filepath.Glob(pattern)
	var errs []error
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || live(filepath.Base(d)) {
			continue
		}
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
