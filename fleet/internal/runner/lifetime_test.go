package runner_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/runner"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestTeardownOutlastsTheTrustWindow: a job cancelled or shut down keeps its lease while its
// teardown runs — the kill, the upload of its artifacts, the destroy — however much longer than
// the lease's trust window that takes, and settles cancelled or worker_shutdown, not unknown.
// How long a real teardown takes depends on the machine (Docker copied 40 MiB out in 0.6 s on
// one, 3 s on another), so the sandboxes' Destroy is made to take two trust windows on its own.
func TestTeardownOutlastsTheTrustWindow(t *testing.T) {
	const (
		ttl    = time.Second
		window = ttl - ttl/5 // lease.Options' default drift
		files  = 16
		size   = 1 << 20
	)
	for _, tc := range []struct {
		name   string
		docker bool
		stop   func(f *fleet, id string)
		status job.Status
		reason job.Reason
	}{
		{"namespace cancel", false, cancelJob, job.StatusCancelled, job.ReasonCancelRequest},
		{"namespace shutdown", false, shutdownWorker, job.StatusFailed, job.ReasonWorkerShutdown},
		{"docker cancel", true, cancelJob, job.StatusCancelled, job.ReasonCancelRequest},
		{"docker shutdown", true, shutdownWorker, job.StatusFailed, job.ReasonWorkerShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := fmt.Sprintf("import time\nfor i in range(%d):\n    with open('out-%%03d.bin' %% i, 'wb') as f: f.write(b'x' * %d)\nprint('up', flush=True)\ntime.sleep(120)", files, size)
			f := newFleet(t)
			// The settle budget holds the uploads under the race detector too, which slows them
			// down several times.
			f.startWorker(workerOpts{ttl: ttl, docker: tc.docker, settleWait: time.Minute, slowDestroy: 2 * window,
				sandbox: runner.SandboxOptions{WorkspaceBytes: (files + 16) * size}})
			id := f.submit(job.Request{Language: "python3", Code: code, Outputs: []string{"out-*.bin"},
				Limits: job.Limits{Timeout: 3 * time.Minute, MemoryBytes: 1 << 30, ArtifactFiles: files, ArtifactBytes: files * size}})
			testenv.WaitFor(t, time.Minute, "the files written", func() bool { return f.pagesStored(id) > 0 })
			tc.stop(f, id)
			st := f.wait(id).st
			if st.Status != tc.status || st.Reason != tc.reason {
				t.Errorf("settled %s/%s (%s), want %s/%s", st.Status, st.Reason, st.Detail, tc.status, tc.reason)
			}
			if int64(len(st.Artifacts)) != files || st.ArtifactsTruncated || !st.SandboxDestroyed {
				t.Errorf("%d artifacts (truncated %v), sandbox destroyed %v; want %d, destroyed", len(st.Artifacts), st.ArtifactsTruncated, st.SandboxDestroyed, files)
			}
			if teardown := st.SettledAt.Sub(st.FinishedAt); teardown <= window {
				t.Errorf("teardown (program ended → settled) took %v, within the trust window %v", teardown, window)
			}
		})
	}
}

// slowDestroy is a provider whose sandboxes take at least d longer to destroy: a daemon slow to
// remove a container, a host slow to tear down a cgroup.
type slowDestroy struct {
	sandbox.Provider
	d time.Duration
}

func (p slowDestroy) Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, shape)
	if err != nil {
		return nil, err
	}
	return slowSandbox{sb, p.d}, nil
}

type slowSandbox struct {
	sandbox.Sandbox
	d time.Duration
}

func (s slowSandbox) ReadFiles(ctx context.Context, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	return s.Sandbox.(sandbox.FileReader).ReadFiles(ctx, match, fn)
}

func (s slowSandbox) Destroy(ctx context.Context) error {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
	}
	return s.Sandbox.Destroy(ctx)
}

func cancelJob(f *fleet, id string) {
	if err := f.client.Cancel(f.t.Context(), id); err != nil {
		f.t.Fatal(err)
	}
}

func shutdownWorker(f *fleet, _ string) { f.shutdown() }

// TestSandboxGoneAtOnceAfterLeaseLoss: a job whose lease another generation took has its sandbox
// killed and destroyed at once — processes, cgroup, container — on a context of its own, not
// left to the minute reaper (this harness runs none).
func TestSandboxGoneAtOnceAfterLeaseLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		docker bool
	}{{"namespace", false}, {"docker", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			f.startWorker(workerOpts{ttl: 2 * time.Second, docker: tc.docker})
			marker := newMarker()
			id := f.submit(job.Request{Language: "python3", Code: markedSleep(marker, 120), Limits: job.Limits{Timeout: 3 * time.Minute}})
			testenv.WaitFor(t, time.Minute, "the program's first output stored", func() bool { return f.pagesStored(id) > 0 })
			rdb := f.redis.Client()
			sb, err := rdb.HGet(t.Context(), keyspace.New("runfleet").Record("default", id), "sandbox").Result()
			if err != nil {
				t.Fatal(err)
			}
			exists := sandboxExists(t, tc.docker, sb)
			if !exists() {
				t.Fatalf("sandbox %s not found while its job runs", sb)
			}
			// Another generation holds the job now: the next extend is refused.
			if err := rdb.Set(t.Context(), keyspace.New("runfleet").Lease("default", id), "99:thief", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			took := testenv.WaitFor(t, 30*time.Second, "the sandbox destroyed after the lease loss", func() bool { return !exists() })
			t.Logf("sandbox %s gone %v after the lease was taken", sb, took)
		})
	}
}

// sandboxExists reports whether the sandbox named sb is still there: its container, or any of
// its cgroups.
func sandboxExists(t *testing.T, useDocker bool, sb string) func() bool {
	if useDocker {
		c, err := client.New(client.FromEnv)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return func() bool {
			_, err := c.ContainerInspect(t.Context(), sb, client.ContainerInspectOptions{})
			if err != nil && !cerrdefs.IsNotFound(err) {
				t.Fatalf("inspect %s: %v", sb, err)
			}
			return err == nil
		}
	}
	return func() bool {
		dirs, err := filepath.Glob("/sys/fs/cgroup/*/runfleet-test/*/" + sb)
		if err != nil {
			t.Fatal(err)
		}
		return len(dirs) > 0
	}
}

// TestServeReturnsOnceDrained: once claimCtx ends, Serve returns as soon as no job runs — at
// once when idle, when the last job settled when busy — and does not wait for runCtx, which a
// worker ends only when its grace period is over. The running slots of max_running are kept
// until then (Running.Keep), which once held Serve until runCtx ended.
func TestServeReturnsOnceDrained(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy bool
	}{{"idle", false}, {"busy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			r := f.startWorker(workerOpts{running: true})
			testenv.WaitFor(t, 30*time.Second, "the worker consuming", r.Consuming)
			var id string
			if tc.busy {
				id = f.submit(job.Request{Language: "python3", Code: "import time\nprint('up', flush=True)\ntime.sleep(2)\nprint('done')"})
				testenv.WaitFor(t, 30*time.Second, "the job's first output", func() bool { return f.pagesStored(id) > 0 })
			}
			f.drain()
			from := time.Now()
			if tc.busy {
				if st := f.wait(id).st; st.Status != job.StatusSucceeded {
					t.Errorf("job running at the stop settled %s/%s, want succeeded", st.Status, st.Reason)
				}
				from = time.Now()
			}
			select {
			case <-f.served:
				t.Logf("Serve returned %v after the %s", time.Since(from), map[bool]string{false: "stop", true: "settlement"}[tc.busy])
			case <-time.After(time.Second):
				t.Fatalf("Serve still running 1s after the %s, with runCtx not ended", map[bool]string{false: "stop", true: "settlement"}[tc.busy])
			}
		})
	}
}
