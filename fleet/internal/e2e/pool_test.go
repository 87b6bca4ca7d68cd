package e2e

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// supervisors lists the namespace sandboxes of worker pid: its children that run as a sandbox
// supervisor, waiting or running alike.
func supervisors(pid int) []int {
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(cmdline, []byte("runfleet-sandbox-init\x00")) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + d.Name() + "/stat")
		s := string(stat)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) && alive(child) {
			out = append(out, child)
		}
	}
	return out
}

// TestWarmPoolLeavesNothing: a worker with waiting sandboxes (two per profile), stopped by
// SIGTERM or killed by SIGKILL, leaves no sandbox behind: on SIGTERM it destroys them before it
// exits 0; on SIGKILL they end within 2 s on their own, and the next worker removes their cgroups.
func TestWarmPoolLeavesNothing(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			f := newFleet(t)
			w := f.start("pooled", "--warm", "2")
			pid := w.cmd.Process.Pid
			full := 2 * len(profile.Builtin(testenv.RootFS(t), ""))
			testenv.WaitFor(t, time.Minute, "two waiting sandboxes per profile", func() bool { return len(supervisors(pid)) == full })
			if st := f.settlement(f.submit(job.Request{Language: "python3", Code: "print(1)"}), 30*time.Second); st.Status != job.StatusSucceeded {
				t.Fatalf("job settled %s/%s", st.Status, st.Reason)
			}
			testenv.WaitFor(t, time.Minute, "the pool refilled", func() bool { return len(supervisors(pid)) == full })
			waiting := supervisors(pid)
			w.signal(sig)
			if sig == syscall.SIGTERM {
				w.exited(t, 30*time.Second)
				if code := w.cmd.ProcessState.ExitCode(); code != 0 {
					t.Errorf("worker exit code = %d, want 0", code)
				}
				for _, p := range waiting {
					if alive(p) {
						t.Errorf("waiting sandbox supervisor %d outlived its worker's clean exit", p)
					}
				}
				if left := leftoverCgroups(pid); len(left) > 0 {
					t.Errorf("sandbox cgroups left behind: %v", left)
				}
				return
			}
			<-w.done
			killed := time.Now()
			testenv.WaitFor(t, 10*time.Second, "the waiting sandboxes gone", func() bool {
				for _, p := range waiting {
					if alive(p) {
						return false
					}
				}
				return true
			})
			if took := time.Since(killed); took > 2*time.Second {
				t.Errorf("waiting sandboxes outlived their worker by %v, want at most 2s", took)
			}
			f.start("next")
			testenv.WaitFor(t, 30*time.Second, "the next worker removed the dead one's cgroups", func() bool { return len(leftoverCgroups(pid)) == 0 })
		})
	}
}

// TestWarmSandboxesUsedOnce runs jobs through a worker with a pool: every job settles, and the
// provider's own dispatch log shows each sandbox took exactly one payload; the metrics show the
// pool served takes warm.
func TestWarmSandboxesUsedOnce(t *testing.T) {
	f := newFleet(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	f.start("pooled", "--warm", "2", "--listen", addr)
	// Jobs come once the pool is full, so that the first of each profile finds one waiting.
	testenv.WaitFor(t, time.Minute, "two sandboxes waiting per profile", func() bool {
		_, body := get(t, "http://"+addr+"/metrics")
		return strings.Contains(body, `runfleet_sandboxes_waiting{profile="python3"} 2`) &&
			strings.Contains(body, `runfleet_sandboxes_waiting{profile="nodejs"} 2`)
	})
	var ids []string
	for i := range 20 {
		lang, code := "python3", "print(1)"
		if i%4 == 3 {
			lang, code = "nodejs", "console.log(1)"
		}
		ids = append(ids, f.submit(job.Request{Language: lang, Code: code}))
	}
	for _, id := range ids {
		if st := f.settlement(id, time.Minute); st.Status != job.StatusSucceeded {
			t.Errorf("job %s settled %s/%s", id, st.Status, st.Reason)
		}
	}
	// The log holds the worker's self-check too: one sandbox per profile, used once as well.
	uses, err := sandbox.CountSandboxUses(f.dlog)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := sandbox.ReadDispatchLog(f.dlog)
	ran := map[string]bool{}
	for _, d := range ds {
		if slices.Contains(ids, d.JobID) {
			ran[d.Sandbox] = true
		}
	}
	if len(ran) != len(ids) {
		t.Errorf("%d sandboxes ran %d jobs, want one each", len(ran), len(ids))
	}
	for id, n := range uses {
		if n != 1 {
			t.Errorf("sandbox %s took %d payloads, want 1", id, n)
		}
	}
	_, body := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(body, `runfleet_sandbox_takes_total{profile="python3",source="warm"}`) ||
		!strings.Contains(body, `runfleet_sandbox_takes_total{profile="nodejs",source="warm"}`) ||
		!strings.Contains(body, "runfleet_sandbox_wait_seconds_bucket{") {
		t.Errorf("/metrics lacks warm takes or the pool's gauges:\n%s", grepLines(body, "sandbox"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestWarmSandboxEndedWhileWaiting kills a worker's waiting sandboxes from outside: the next job
// is not run in a dead one, but in one the worker takes or creates instead, and succeeds.
func TestWarmSandboxEndedWhileWaiting(t *testing.T) {
	f := newFleet(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	w := f.start("pooled", "--warm", "1", "--listen", addr)
	pid := w.cmd.Process.Pid
	testenv.WaitFor(t, time.Minute, "one sandbox waiting per profile", func() bool {
		_, body := get(t, "http://"+addr+"/metrics")
		return strings.Contains(body, `runfleet_sandboxes_waiting{profile="python3"} 1`) &&
			strings.Contains(body, `runfleet_sandboxes_waiting{profile="nodejs"} 1`)
	})
	killed := supervisors(pid)
	for _, p := range killed {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	// Gone from /proc: the worker has reaped them, so it knows they ended.
	testenv.WaitFor(t, 30*time.Second, "the killed sandboxes reaped", func() bool {
		for _, p := range killed {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
				return false
			}
		}
		return true
	})
	if st := f.settlement(f.submit(job.Request{Language: "python3", Code: "print('alive')"}), 30*time.Second); st.Status != job.StatusSucceeded {
		t.Errorf("job after its waiting sandbox was killed settled %s/%s, want succeeded", st.Status, st.Reason)
	}
	if !strings.Contains(w.logText(), "waiting sandbox had ended") {
		t.Errorf("the worker's log does not say it skipped the ended sandbox")
	}
}
