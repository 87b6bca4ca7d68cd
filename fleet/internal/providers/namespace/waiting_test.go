package namespace_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// interpreterPID finds the program of a sandbox from its cgroup: the process that is not root.
func interpreterPID(t *testing.T, cg, id string) int {
	for _, dir := range sandboxCgroups(cg, id) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if uid, ok := procUID(pid); ok && uid != 0 {
				return pid
			}
		}
	}
	t.Fatalf("no program in the cgroups of %s", id)
	return 0
}

func procUID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				return uid, err == nil
			}
		}
	}
	return 0, false
}

// TestProgramDiedWhileWaiting: a waiting sandbox whose interpreter died refuses its job with
// ErrEnded, and the job runs in another sandbox of the pool, as the runner takes one.
func TestProgramDiedWhileWaiting(t *testing.T) {
	cg := "runfleet-test"
	p := newProvider(t, cg)
	shape := providertest.Shape(profile.Builtin(testenv.RootFS(t), "")["python3"])
	pl := pool.New(p, []sandbox.Shape{shape}, pool.Options{Size: 1})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { pl.Run(ctx) })
	defer func() {
		stop()
		wg.Wait()
	}()
	testenv.WaitFor(t, time.Minute, "a waiting sandbox", func() bool { return pl.WaitingFor("python3") > 0 })
	sb, warm, err := pl.Take(ctx, shape)
	if err != nil || !warm {
		t.Fatalf("Take() = warm %v, %v; want a waiting sandbox", warm, err)
	}
	if err := syscall.Kill(interpreterPID(t, cg, sb.ID()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the supervisor's report of the program's end", func() bool { return namespace.StatusPending(sb) })
	ended := 0
	for {
		err := sb.Assign(ctx, providertest.Job("after-death"))
		if err == nil {
			break
		}
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			t.Error(derr)
		}
		if !errors.Is(err, sandbox.ErrEnded) || ended > 0 {
			t.Fatalf("Assign() error = %v, want ErrEnded for the dead sandbox only", err)
		}
		ended++
		if sb, _, err = pl.Take(ctx, shape); err != nil {
			t.Fatal(err)
		}
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	if ended != 1 {
		t.Errorf("Assign() took the sandbox whose program died")
	}
	payload, _ := profile.Payload(job.Request{Code: "print(6*7)"})
	var out, errb bytes.Buffer
	exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
	if err != nil || exit.Code != 0 || out.String() != "42\n" {
		t.Errorf("Run() = %+v, %v, stdout %q, stderr %q; want 42", exit, err, out.String(), errb.String())
	}
}
