package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// benchParallel is the parallelism of every loop of the side-by-side benchmarks: the fleet's
// concurrency, and the bare loops' workers.
const benchParallel = 2

// loopStats is one loop of a side-by-side benchmark.
type loopStats struct {
	name string
	n    int
	wall time.Duration
	lat  []time.Duration
	note string
}

func (s loopStats) rate() float64 { return float64(s.n) / s.wall.Seconds() }

func (s loopStats) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	l := slices.Clone(s.lat)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

// loop runs one b.N times, benchParallel at once, and reports runs/s and the median.
func loop(b *testing.B, name string, one func(ctx context.Context) error) loopStats {
	st := loopStats{name: name}
	b.Run(name, func(b *testing.B) {
		var next atomic.Int64
		var mu sync.Mutex
		var lat []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for range benchParallel {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					t0 := time.Now()
					err := one(b.Context())
					mu.Lock()
					lat = append(lat, time.Since(t0))
					if err != nil && firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		st = loopStats{name: name, n: b.N, wall: time.Since(start), lat: lat}
		b.ReportMetric(st.rate(), "runs/s")
		b.ReportMetric(float64(st.pct(0.5).Microseconds())/1000, "ms-p50")
	})
	return st
}

// table prints the loops beside the baseline, as ratios.
func table(b *testing.B, base loopStats, rows ...loopStats) {
	var out strings.Builder
	w := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "loop\truns\truns/s\tp50\tp99\tthroughput ×%s\tp50 ×%s\t\t\n", base.name, base.name)
	for _, r := range append([]loopStats{base}, rows...) {
		if r.n == 0 {
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%v\t%v\t%.2f\t%.2f\t%s\t\n", r.name, r.n, r.rate(), r.pct(0.5).Round(100*time.Microsecond),
			r.pct(0.99).Round(100*time.Microsecond), r.rate()/base.rate(), float64(r.pct(0.5))/float64(base.pct(0.5)), r.note)
	}
	w.Flush()
	// Printed, not logged: the table is the benchmark's output, and -v would bury it in worker logs.
	fmt.Printf("%s: parallelism %d, trivial python3 (`pass`), one run:\n%s", b.Name(), benchParallel, out.String())
}

// fleetLoop is the fleet's closed loop: each of benchParallel clients submits a job and waits
// for its settlement, from publish to settled.
func fleetLoop(f *fleet) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		r := f.run(job.Request{Language: "python3", Code: "pass"})
		if r.st.Status != job.StatusSucceeded {
			return fmt.Errorf("job settled %s/%s", r.st.Status, r.st.Reason)
		}
		return nil
	}
}

// fleetStats runs the fleet's closed loop on a worker started with o, and notes how many takes
// were served warm.
func fleetStats(b *testing.B, name string, o workerOpts) loopStats {
	w := &waits{}
	o.observer = w
	f := newFleet(b)
	f.startWorker(o)
	st := loop(b, name, fleetLoop(f))
	w.mu.Lock()
	defer w.mu.Unlock()
	st.note = fmt.Sprintf("takes warm %d, cold %d", w.warm, w.cold)
	return st
}

// pacedStats runs one job at a time, each once the pool is full again: the latency of a job that
// finds its sandbox waiting, which is what the pool is for. Its throughput is not the fleet's.
func pacedStats(b *testing.B, name string, o workerOpts) loopStats {
	w := &waits{}
	o.observer = w
	f := newFleet(b)
	f.startWorker(o)
	st := loopStats{name: name}
	b.Run(st.name, func(b *testing.B) {
		var lat []time.Duration
		var busy time.Duration
		for b.Loop() {
			for f.pool.Waiting() < 2*o.warm {
				time.Sleep(time.Millisecond)
			}
			t0 := time.Now()
			if err := fleetLoop(f)(b.Context()); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			busy += time.Since(t0)
		}
		st.n, st.wall, st.lat = len(lat), busy, lat
		b.ReportMetric(float64(st.pct(0.5).Microseconds())/1000, "ms-p50")
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	st.note = fmt.Sprintf("one at a time, pool full: takes warm %d, cold %d", w.warm, w.cold)
	return st
}

// providerLoop is the provider's own create → assign → run → destroy, without the queue.
func providerLoop(p sandbox.Provider, prof sandbox.Profile) func(ctx context.Context) error {
	payload, _ := profile.Payload(job.Request{Code: "pass"})
	limits := sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 256 << 20, Pids: 64, CPUs: 1}
	return func(ctx context.Context) error {
		sb, err := p.Create(ctx, sandbox.Shape{Profile: prof, Limits: limits})
		if err != nil {
			return err
		}
		defer sb.Destroy(context.WithoutCancel(ctx))
		if err := sb.Assign(ctx, sandbox.Job{ID: "bench", Limits: limits}); err != nil {
			return err
		}
		exit, err := sb.Run(ctx, bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil && exit.Code != 0 {
			err = fmt.Errorf("exit %d", exit.Code)
		}
		return err
	}
}

// command runs argv and fails on a non-zero exit.
func command(argv ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %w: %s", argv, err, out)
		}
		return nil
	}
}

// bwrapArgv is a bare bubblewrap run of python3 in the same root file system, every namespace
// unshared.
func bwrapArgv(b *testing.B) []string {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		testenv.Missing(b, "bwrap (apt-get install bubblewrap)")
	}
	argv := []string{bwrap, "--unshare-all", "--die-with-parent", "--new-session"}
	if root := testenv.RootFS(b); root != "" {
		argv = append(argv, "--ro-bind", root, "/")
	} else {
		argv = append(argv, "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin")
	}
	return append(argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/workspace",
		"--chdir", "/workspace", "/usr/bin/python3", "-I", "-c", "pass")
}

// BenchmarkFleetNamespace prints, in one run, trivial python3 jobs through the whole fleet
// (JetStream, Redis, runner, namespace provider) with the pool off and on, each with every
// sandbox's interpreter exec'd and forked from a zygote, beside a bare bwrap loop and the
// provider's own create/run/destroy loop, as ratios to the bwrap loop. Sandboxes start the small
// static supervisor, as a worker built by make does, not this test binary.
//
//	go test -run '^$' -bench FleetNamespace -benchtime 200x ./internal/runner/
func BenchmarkFleetNamespace(b *testing.B) {
	testenv.NeedRoot(b)
	bare := loop(b, "bwrap", command(bwrapArgv(b)...))
	bin, err := testenv.DockerInit()
	if err != nil {
		b.Fatal(err)
	}
	sup, err := supervise.PrivateCopyFile(bin, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	rows := []loopStats{}
	for _, mode := range []struct {
		name     string
		noZygote bool
	}{{"exec", true}, {"zygote", false}} {
		p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", Supervisor: sup, NoZygote: mode.noZygote})
		if err != nil {
			testenv.Missing(b, "namespace provider: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		rows = append(rows,
			loop(b, "provider-"+mode.name, providerLoop(p, profile.Builtin(testenv.RootFS(b), "")["python3"])),
			fleetStats(b, "fleet-cold-"+mode.name, workerOpts{concurrency: benchParallel, provider: p}),
			fleetStats(b, "fleet-warm-"+mode.name, workerOpts{concurrency: benchParallel, warm: benchParallel, provider: p}),
			pacedStats(b, "fleet-warm-paced-"+mode.name, workerOpts{concurrency: benchParallel, warm: benchParallel, provider: p}))
	}
	table(b, bare, rows...)
}

// BenchmarkFleetDocker prints, in one run, trivial python3 jobs through the fleet on the Docker
// provider with the pool off and on, beside the raw Docker API create/start/wait/remove loop and
// a `docker run --rm` loop, as ratios to the API loop.
//
//	flock /work/wt/heavy.lock go test -run '^$' -bench FleetDocker -benchtime 40x ./internal/runner/
func BenchmarkFleetDocker(b *testing.B) {
	ctx := b.Context()
	initBin, err := testenv.DockerInit()
	if err != nil {
		b.Fatalf("static worker for the container init: %v", err)
	}
	p, err := docker.New(ctx, docker.Options{Fleet: "runfleet-test-bench", Worker: "bench", InitBinary: initBin})
	if err != nil {
		testenv.Missing(b, "docker daemon: %v", err)
	}
	b.Cleanup(func() { _ = p.Close() })
	c, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		testenv.Missing(b, "docker daemon: %v", err)
	}
	img := testenv.Image()
	api := loop(b, "docker-api", func(ctx context.Context) error {
		created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: img, Cmd: []string{"/usr/bin/python3", "-I", "-c", "pass"}, NetworkDisabled: true},
			HostConfig: &container.HostConfig{NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"}},
		})
		if err != nil {
			return err
		}
		defer c.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
		wait := c.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
		if _, err := c.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			return err
		}
		select {
		case r := <-wait.Result:
			if r.StatusCode != 0 {
				return fmt.Errorf("exit %d", r.StatusCode)
			}
			return nil
		case err := <-wait.Error:
			return err
		}
	})
	run := loop(b, "docker-run", command("docker", "run", "--rm", "--network", "none", img, "/usr/bin/python3", "-I", "-c", "pass"))
	coldSt := fleetStats(b, "fleet-cold", workerOpts{concurrency: benchParallel, provider: p})
	warmSt := fleetStats(b, "fleet-warm", workerOpts{concurrency: benchParallel, provider: p, warm: benchParallel})
	paced := pacedStats(b, "fleet-warm-paced", workerOpts{concurrency: benchParallel, provider: p, warm: benchParallel})
	table(b, api, run, coldSt, warmSt, paced)
}

// waits records how long jobs waited for a sandbox, and how takes were served.
type waits struct {
	mu         sync.Mutex
	d          []time.Duration
	warm, cold int
}

func (w *waits) Waiting(string, int) {}

func (w *waits) Took(_ string, warm bool, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	if warm {
		w.warm++
	} else {
		w.cold++
	}
}

// BenchmarkBurst submits b.N trivial python3 jobs at once to a worker of concurrency 2 with a
// pool of 2 per profile, faster than the pool refills, and prints how long jobs waited for a
// sandbox (p50, p99) and how many takes the pool served warm.
//
//	flock /work/wt/heavy.lock go test -run '^$' -bench Burst -benchtime 200x ./internal/runner/
func BenchmarkBurst(b *testing.B) {
	w := &waits{}
	f := newFleet(b)
	f.startWorker(workerOpts{concurrency: benchParallel, warm: benchParallel, observer: w})
	b.ResetTimer()
	start := time.Now()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3", Code: "pass"})
	}
	var failed error
	for _, id := range ids {
		if r := f.wait(id); r.st.Status != job.StatusSucceeded {
			failed = errors.Join(failed, fmt.Errorf("%s settled %s/%s", id, r.st.Status, r.st.Reason))
		}
	}
	wall := time.Since(start)
	if failed != nil {
		b.Fatal(failed)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := loopStats{lat: w.d}
	b.ReportMetric(float64(b.N)/wall.Seconds(), "jobs/s")
	b.ReportMetric(float64(st.pct(0.5).Microseconds())/1000, "ms-wait-p50")
	b.ReportMetric(float64(st.pct(0.99).Microseconds())/1000, "ms-wait-p99")
	fmt.Printf("%s: burst of %d jobs: %.1f jobs/s; waited for a sandbox p50 %v, p99 %v, max %v; takes warm %d, cold %d\n", b.Name(),
		b.N, float64(b.N)/wall.Seconds(), st.pct(0.5), st.pct(0.99), st.pct(1), w.warm, w.cold)
}
