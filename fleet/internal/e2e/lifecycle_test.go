package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestSIGTERMRightAfterReady stops an idle worker the moment /readyz says it is ready, again and
// again: ready means consuming, and a stop at any moment after start is a clean exit 0.
func TestSIGTERMRightAfterReady(t *testing.T) {
	f := newFleet(t)
	for i := range 8 {
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		w := f.start(fmt.Sprintf("quick-%d", i), "--listen", addr)
		waitStatus(t, "http://"+addr+"/readyz", 200)
		w.signal(syscall.SIGTERM)
		w.exited(t, 20*time.Second)
		if code := w.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("try %d: exit code = %d, want 0; log:\n%s", i, code, w.logText())
		}
	}
}

// TestStopsAsSoonAsIdle: SIGTERM ends a worker as soon as no job of its runs, however long
// --grace is: an idle one within a second of the signal, a busy one within a second of its last
// job's settlement, and that job is not killed. (An idle worker once waited out its whole grace.)
func TestStopsAsSoonAsIdle(t *testing.T) {
	f := newFleet(t)
	for _, tc := range []struct {
		name string
		busy bool
	}{{"idle", false}, {"busy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			w := f.start("stopping-"+tc.name, "--listen", addr, "--grace", "30s")
			waitStatus(t, "http://"+addr+"/readyz", 200)
			var id string
			if tc.busy {
				id = f.submit(job.Request{Language: "python3", Code: "import time\nprint('up', flush=True)\ntime.sleep(2)\nprint('done')"})
				testenv.WaitFor(t, 30*time.Second, "the job started", func() bool { return len(f.results(id)) > 0 })
			}
			w.signal(syscall.SIGTERM)
			from, what := time.Now(), "SIGTERM"
			if tc.busy {
				st := f.settlement(id, 30*time.Second)
				if st.Status != job.StatusSucceeded {
					t.Errorf("job running at SIGTERM settled %s/%s, want succeeded", st.Status, st.Reason)
				}
				from, what = st.SettledAt, "its last job settled"
			}
			w.exited(t, 40*time.Second)
			took := time.Since(from)
			t.Logf("%s worker exited %v after %s", tc.name, took, what)
			if took > time.Second {
				t.Errorf("%s worker exited %v after %s, want within 1s (--grace 30s)", tc.name, took, what)
			}
			if code := w.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code = %d, want 0", code)
			}
		})
	}
}

// TestDevWorkerTakesItsRedisAlong kills `worker --dev` with SIGKILL: its child redis-server
// must not outlive it.
func TestDevWorkerTakesItsRedisAlong(t *testing.T) {
	testenv.NeedRoot(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server on PATH (Debian package redis-server)")
	}
	args := []string{"--dev", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t)),
		"--listen", "127.0.0.1:0", "--concurrency", "1"}
	if root := testenv.RootFS(t); root != "" {
		args = append(args, "--rootfs", root)
	}
	cmd := exec.Command(workerBin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	var redisPid int
	testenv.WaitFor(t, 30*time.Second, "the dev redis-server started", func() bool {
		redisPid = childNamed(cmd.Process.Pid, "redis-server")
		return redisPid != 0
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	killed := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the dev redis-server gone", func() bool { return !alive(redisPid) })
	if took := time.Since(killed); took > 2*time.Second {
		t.Errorf("redis-server outlived its worker by %v, want at most 2s", took)
	}
}

// childNamed returns the pid of a child of parent whose command is name, or 0.
func childNamed(parent int, name string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read from the last ')'.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) && s[open+1:end] == name {
			return pid
		}
	}
	return 0
}

// alive reports whether pid is a process that has not ended (a zombie has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}
