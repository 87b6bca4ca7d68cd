package namespace_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestForkBombLeavesSupervisorTasks: the supervisor holds its share of the pids limit
// (sandbox.SupervisorTasks) before the program starts, so a program that forks until refused
// stops at the job's pids (16: Assign's, not the warm sandbox's 32), and the supervisor, which
// never needs a thread more, ends it and reports its status. Before, the supervisor started
// threads as it needed them, the program took what it had not, and a supervisor that then needed
// one died ("failed to create new OS thread"), losing the job's outcome (TestHostileCorpus's fork
// bomb, now and then, in CI).
func TestForkBombLeavesSupervisorTasks(t *testing.T) {
	const pids = 16
	p := newProvider(t, "runfleet-test-pids")
	sb := providertest.Create(t.Context(), t, providertest.Env{Provider: p}, profile.Builtin(testenv.RootFS(t), "")["python3"],
		func(l *sandbox.Limits) { l.Pids = pids })
	defer sb.Destroy(context.WithoutCancel(t.Context()))
	payload, err := profile.Payload(job.Request{Code: "import os, time\nn = 0\ntry:\n    while True:\n" +
		"        if os.fork() == 0:\n            time.sleep(600); os._exit(0)\n        n += 1\n" +
		"except OSError:\n    print('capped', n, flush=True)\ntime.sleep(600)"})
	if err != nil {
		t.Fatal(err)
	}
	capped := make(chan int, 1)
	out := writerFunc(func(b []byte) (int, error) {
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == "capped" {
			n, _ := strconv.Atoi(f[1])
			capped <- n
		}
		return len(b), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var runErr error
	var exit sandbox.Exit
	var errb bytes.Buffer
	wg.Go(func() { exit, runErr = sb.Run(ctx, bytes.NewReader(payload), out, &errb) })
	select {
	case n := <-capped:
		if n+1 > pids {
			t.Errorf("the program made %d processes, want at most the job's %d", n+1, pids)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the program did not report its forks refused within a minute; stderr %q", errb.String())
	}
	held, err := namespace.SupervisorThreads(sb)
	if err != nil || held < sandbox.SupervisorTasks {
		t.Errorf("the supervisor has %d threads (%v), want the %d counted for it", held, err, sandbox.SupervisorTasks)
	}
	dirs := sandboxCgroups("runfleet-test-pids", sb.ID())
	var checked bool
	for _, dir := range dirs {
		cur, err1 := os.ReadFile(filepath.Join(dir, "pids.current"))
		lim, err2 := os.ReadFile(filepath.Join(dir, "pids.max"))
		if err1 != nil || err2 != nil {
			continue
		}
		checked = true
		c, _ := strconv.Atoi(strings.TrimSpace(string(cur)))
		m, _ := strconv.Atoi(strings.TrimSpace(string(lim)))
		if m != pids+sandbox.SupervisorTasks || c > m {
			t.Errorf("%s: pids.current %d, pids.max %d; want max %d", dir, c, m, pids+sandbox.SupervisorTasks)
		}
	}
	if !checked {
		t.Fatalf("no pids cgroup of sandbox %s among %v", sb.ID(), dirs)
	}
	cancel()
	wg.Wait()
	if runErr != nil || !exit.Killed {
		t.Errorf("Run() = %+v, %v; want the program killed on cancel and its status reported", exit, runErr)
	}
	if after, err := namespace.SupervisorThreads(sb); err != nil || after != held {
		t.Errorf("the supervisor has %d threads after the program ended (%v), had %d: it started one", after, err, held)
	}
}
