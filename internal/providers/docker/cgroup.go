package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/sandbox/cgstat"
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
