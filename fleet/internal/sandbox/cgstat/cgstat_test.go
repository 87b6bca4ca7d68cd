package cgstat

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStats(t *testing.T) {
	v1mem, v1cpu, v2 := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, v1mem, map[string]string{"memory.max_usage_in_bytes": "4096\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"})
	write(t, v1cpu, map[string]string{"cpuacct.usage": "1500000\n"})
	write(t, v2, map[string]string{"cpu.stat": "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n", "memory.peak": "8192\n",
		"memory.events": "low 0\nhigh 0\nmax 1\noom 1\noom_kill 0\n"})
	for _, c := range []struct {
		name string
		got  Stats
		cpu  time.Duration
		peak int64
		oom  bool
	}{
		{"v1", V1(v1mem, v1cpu), 1500 * time.Microsecond, 4096, true},
		{"v2", V2(v2), 2500 * time.Microsecond, 8192, false},
	} {
		if c.got.CPU == nil || *c.got.CPU != c.cpu || c.got.Peak == nil || *c.got.Peak != c.peak || c.got.OOM != c.oom {
			t.Errorf("%s: Stats = %v %v %v, want %v %d %v", c.name, c.got.CPU, c.got.Peak, c.got.OOM, c.cpu, c.peak, c.oom)
		}
	}
	if s := V2(t.TempDir()); s.CPU != nil || s.Peak != nil || s.OOM {
		t.Errorf("V2(empty dir) = %+v, want nothing measured", s)
	}
}

// TestMeter: a meter marked reports the CPU time since the mark, and on cgroup v1 restarts the
// memory peak (written 0, as the kernel resets it).
func TestMeter(t *testing.T) {
	mem, cpu := t.TempDir(), t.TempDir()
	write(t, mem, map[string]string{"memory.max_usage_in_bytes": "4096\n"})
	write(t, cpu, map[string]string{"cpuacct.usage": "70000000\n"})
	m := NewV1(mem, cpu)
	if s := m.Read(); s.CPU == nil || *s.CPU != 70*time.Millisecond {
		t.Errorf("Read() before Mark: CPU = %v, want the whole life's 70ms", s.CPU)
	}
	if !m.Mark() {
		t.Errorf("Mark() = false, want the v1 peak reset")
	}
	if b, _ := os.ReadFile(filepath.Join(mem, "memory.max_usage_in_bytes")); string(b) != "0" {
		t.Errorf("memory.max_usage_in_bytes = %q after Mark, want 0 written", b)
	}
	write(t, cpu, map[string]string{"cpuacct.usage": "75000000\n"})
	if s := m.Read(); s.CPU == nil || *s.CPU != 5*time.Millisecond {
		t.Errorf("Read() after Mark: CPU = %v, want 5ms", s.CPU)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}
