// Package cgstat reads what a cgroup measured of the processes it held: CPU time, peak memory
// and OOM kills, on cgroup v1 and v2. Counters are hierarchical, so a parent's still count the
// processes of a child cgroup already removed (a container's, which Docker removes on exit).
package cgstat

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stats are a cgroup's counters; nil fields could not be read.
type Stats struct {
	CPU  *time.Duration
	Peak *int64 // bytes
	OOM  bool   // some process was killed for memory (local to the cgroup on v1, but see Meter.Read)
}

// V1 reads cpuacct.usage in cpuacctDir and memory.max_usage_in_bytes and memory.oom_control in
// memoryDir.
func V1(memoryDir, cpuacctDir string) Stats {
	var s Stats
	if ns, ok := readInt(filepath.Join(cpuacctDir, "cpuacct.usage")); ok {
		d := time.Duration(ns)
		s.CPU = &d
	}
	if peak, ok := readInt(filepath.Join(memoryDir, "memory.max_usage_in_bytes")); ok {
		s.Peak = &peak
	}
	if n, ok := Keyed(filepath.Join(memoryDir, "memory.oom_control"), "oom_kill"); ok {
		s.OOM = n > 0
	}
	return s
}

// V2 reads cpu.stat, memory.peak (Linux 5.19 and later) and memory.events in dir.
func V2(dir string) Stats {
	var s Stats
	if us, ok := Keyed(filepath.Join(dir, "cpu.stat"), "usage_usec"); ok {
		d := time.Duration(us) * time.Microsecond
		s.CPU = &d
	}
	if peak, ok := readInt(filepath.Join(dir, "memory.peak")); ok {
		s.Peak = &peak
	}
	if n, ok := Keyed(filepath.Join(dir, "memory.events"), "oom_kill"); ok {
		s.OOM = n > 0
	}
	return s
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// Keyed reads the value of key in a file of "key value" lines (cpu.stat, memory.events,
// memory.oom_control).
func Keyed(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
