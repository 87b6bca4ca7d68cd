package cgstat

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A Meter reads one cgroup's counters from a mark on: a sandbox made ahead of its job has used
// CPU time and memory starting and waiting, which are not the job's.
type Meter struct {
	v2      bool
	memory  string // v1 memory directory; v2 the cgroup's
	cpuacct string // v1 cpuacct directory; v2 the cgroup's
	cpu0    time.Duration
	peak    *os.File // v2: memory.peak, reset through this descriptor
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

// Read returns the counters since the mark, or the cgroup's whole life's without one.
func (m *Meter) Read() Stats {
	s := m.read()
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
	if m.peak == nil {
		return nil
	}
	err := m.peak.Close()
	m.peak = nil
	return err
}
