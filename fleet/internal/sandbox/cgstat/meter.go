package cgstat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A Meter reads one cgroup's counters from a mark on: a sandbox made ahead of its job has used
// CPU time and memory starting and waiting, which are not the job's.
type Meter struct {
	v2      bool
	memory  string // v1 memory directory; v2 the cgroup's
	cpuacct string // v1 cpuacct directory; v2 the cgroup's
	cpu0    time.Duration
	peak    *os.File  // v2: memory.peak, reset through this descriptor
	oom     *oomWatch // v1: see watchOOM
}

// oomWatch is an eventfd the kernel signals when a v1 memory cgroup is under OOM, and the
// cgroup's memory.oom_control, which it is registered on.
type oomWatch struct {
	events, control int
	seen            bool // the eventfd's count resets when read: what it said is kept
}

// NewV1 measures the cgroup v1 cgroups memoryDir and cpuacctDir.
func NewV1(memoryDir, cpuacctDir string) *Meter {
	return &Meter{memory: memoryDir, cpuacct: cpuacctDir}
}

// NewV2 measures the cgroup v2 cgroup dir.
func NewV2(dir string) *Meter { return &Meter{v2: true, memory: dir, cpuacct: dir} }

// Mark starts the measure now: Read then subtracts the CPU time used so far, and the memory peak
// restarts at the current usage where the kernel allows it: on cgroup v1 always
// (memory.max_usage_in_bytes), on v2 from Linux 6.12 (memory.peak, reset for reads through the
// descriptor that wrote it). Elsewhere the peak stays the cgroup's whole life's; Mark says which.
func (m *Meter) Mark() (peakReset bool) {
	if cpu := m.read().CPU; cpu != nil {
		m.cpu0 = *cpu
	}
	if !m.v2 {
		m.watchOOM()
		return os.WriteFile(filepath.Join(m.memory, "memory.max_usage_in_bytes"), []byte("0"), 0) == nil
	}
	f, err := os.OpenFile(filepath.Join(m.memory, "memory.peak"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	if _, err := f.WriteString("reset"); err != nil {
		f.Close()
		return false
	}
	m.peak = f
	return true
}

// watchOOM registers an OOM notification on the v1 memory cgroup. Its oom_kill counter counts
// only the kills of its own processes, not of a child cgroup's: a limit set on a parent (the
// Docker provider's, for gVisor) whose kill took the child's whole container, which Docker then
// removed with its counter, left no trace but this notification, which the kernel sends to the
// cgroup whose limit was hit. Best effort: without it, Read has the counter alone.
func (m *Meter) watchOOM() {
	_ = m.closeOOM()
	control, err := unix.Open(filepath.Join(m.memory, "memory.oom_control"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	events, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(control)
		return
	}
	if err := register(filepath.Join(m.memory, "cgroup.event_control"), fmt.Sprintf("%d %d", events, control)); err != nil {
		unix.Close(events)
		unix.Close(control)
		return
	}
	m.oom = &oomWatch{events: events, control: control}
}

// register writes line to a cgroup's existing control file.
func register(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	return errors.Join(err, f.Close())
}

// oomNotified reports whether the kernel signalled an OOM since watchOOM.
func (m *Meter) oomNotified() bool {
	w := m.oom
	if w == nil {
		return false
	}
	if !w.seen {
		var b [8]byte
		n, err := unix.Read(w.events, b[:])
		w.seen = err == nil && n == len(b) && binary.NativeEndian.Uint64(b[:]) > 0
	}
	return w.seen
}

func (m *Meter) closeOOM() error {
	w := m.oom
	if w == nil {
		return nil
	}
	m.oom = nil
	return errors.Join(unix.Close(w.events), unix.Close(w.control))
}

// Read returns the counters since the mark, or the cgroup's whole life's without one. On cgroup
// v1 its OOM also counts a kill in a descendant cgroup after the mark (see watchOOM).
func (m *Meter) Read() Stats {
	s := m.read()
	s.OOM = s.OOM || m.oomNotified()
	if s.CPU != nil {
		d := max(*s.CPU-m.cpu0, 0)
		s.CPU = &d
	}
	if m.peak != nil {
		s.Peak = nil
		b := make([]byte, 32)
		n, err := m.peak.ReadAt(b, 0)
		if err == nil || errors.Is(err, io.EOF) {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64); err == nil {
				s.Peak = &v
			}
		}
	}
	return s
}

func (m *Meter) read() Stats {
	if m.v2 {
		return V2(m.memory)
	}
	return V1(m.memory, m.cpuacct)
}

// Close releases what Mark holds open.
func (m *Meter) Close() error {
	err := m.closeOOM()
	if m.peak == nil {
		return err
	}
	err = errors.Join(err, m.peak.Close())
	m.peak = nil
	return err
}
