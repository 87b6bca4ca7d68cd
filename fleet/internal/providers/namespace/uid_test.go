package namespace_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// processesOf lists the processes of uid on the host.
func processesOf(uid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if u, ok := procUID(pid); ok && u == uid {
			out = append(out, pid)
		}
	}
	return out
}

// lockWhenFree takes the uid's lock as soon as it is released, and then lists the processes of
// the uid on the host: none may remain.
func lockWhenFree(t *testing.T, locks string, uid int) <-chan []int {
	f, err := os.Open(filepath.Join(locks, strconv.Itoa(uid)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	left := make(chan []int, 1)
	go func() {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			left <- []int{-1}
			return
		}
		left <- processesOf(uid)
	}()
	return left
}

func checkNoneLeft(t *testing.T, left <-chan []int, uid int) {
	t.Helper()
	select {
	case procs := <-left:
		if len(procs) > 0 {
			t.Errorf("uid %d given back while %d of its processes live: %v", uid, len(procs), procs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("uid %d not given back within a minute", uid)
	}
}

// TestUIDHeldUntilEmpty: a uid is handed out again only when no process of it remains, when the
// sandbox's worker is SIGKILLed while its program's processes run.
func TestUIDHeldUntilEmpty(t *testing.T) {
	testenv.NeedRoot(t)
	const base = 470000 // this test's own uids: it looks for their processes on the host
	t.Run("worker killed", func(t *testing.T) {
		locks := t.TempDir()
		c := providertest.StartChild(t, providertest.ChildSleepers, "RUNFLEET_TEST_CGROUP=runfleet-test-uidheld",
			"RUNFLEET_TEST_STATE="+t.TempDir(), "RUNFLEET_TEST_UID_LOCKS="+locks, "RUNFLEET_TEST_UID_BASE="+strconv.Itoa(base))
		f := strings.Fields(c.Line(t))
		uid, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 2 || f[0] != "uid" || err != nil {
			t.Fatalf("child worker printed %q, want uid UID", f)
		}
		if n := len(processesOf(uid)); n <= providertest.ChildSleeperCount {
			t.Fatalf("%d processes of uid %d, want more than %d: the check cannot fail", n, uid, providertest.ChildSleeperCount)
		}
		left := lockWhenFree(t, locks, uid)
		c.Kill(t)
		checkNoneLeft(t, left, uid)
	})
	t.Run("supervisor killed", func(t *testing.T) {
		locks := t.TempDir()
		p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test-uidheld", StateDir: t.TempDir(), UIDBase: base + 100, UIDLockDir: locks})
		if err != nil {
			testenv.Missing(t, "namespace provider: %v", err)
		}
		defer p.Close()
		sb := providertest.Create(t.Context(), t, providertest.Env{Provider: p}, profile.Builtin(testenv.RootFS(t), "")["python3"], nil)
		defer sb.Destroy(context.WithoutCancel(t.Context()))
		payload, _ := profile.Payload(job.Request{Code: "import os, time\nfor _ in range(20):\n    if os.fork() == 0:\n        time.sleep(600); os._exit(0)\n" +
			"print('uid', os.getuid(), flush=True)\ntime.sleep(600)"})
		uids := make(chan int, 1)
		out := writerFunc(func(b []byte) (int, error) {
			if f := strings.Fields(string(b)); len(f) == 2 {
				n, _ := strconv.Atoi(f[1])
				uids <- n
			}
			return len(b), nil
		})
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { _, _ = sb.Run(t.Context(), bytes.NewReader(payload), out, &bytes.Buffer{}) })
		var uid int
		select {
		case uid = <-uids:
		case <-time.After(time.Minute):
			t.Fatal("no uid printed within a minute")
		}
		left := lockWhenFree(t, locks, uid)
		if err := namespace.SignalSupervisor(sb, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := sb.Destroy(t.Context()); err != nil {
			t.Error(err)
		}
		checkNoneLeft(t, left, uid)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
