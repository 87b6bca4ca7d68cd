package providertest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// BenchCycle measures create → run `pass` in python3 → destroy, against baseline, a command run
// in the same loop (the bare interpreter, or `docker run --rm`), as two sub-benchmarks of one run.
func BenchCycle(b *testing.B, e Env, baseline []string) {
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(baseline[0], baseline[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %v: %s", baseline, err, out)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) { BenchJob(b, e, "pass") })
}

// BenchJob measures create → run code in python3 → destroy.
func BenchJob(b *testing.B, e Env, code string) {
	payload, _ := profile.Payload(job.Request{Code: code})
	for b.Loop() {
		sb := Create(b.Context(), b, e, e.Profiles["python3"], nil)
		exit, err := sb.Run(b.Context(), bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil || exit.Code != 0 {
			b.Fatalf("Run() = %+v, %v", exit, err)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchSteps measures each step of a sandbox's life on its own, one sandbox at a time: create
// (all a pool takes off a job's path), assign, run `pass` in python3 (payload in → exit), destroy.
// It reports the medians, the CPU time the process and its children spent per cycle, and the
// CPU the provider measured in the sandbox's cgroup (a container's processes are no children).
func BenchSteps(b *testing.B, e Env, lang, code string) {
	payload, _ := profile.Payload(job.Request{Code: code})
	var steps [4][]time.Duration
	var cgroupCPU time.Duration // what the provider measured in the sandbox's cgroup, when it does
	var self0, kids0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
	for b.Loop() {
		t0 := time.Now()
		sb, err := e.Provider.Create(b.Context(), Shape(e.Profiles[lang]))
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := sb.Assign(b.Context(), Job("bench")); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		exit, err := sb.Run(b.Context(), bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil || exit.Code != 0 {
			b.Fatalf("Run() = %+v, %v", exit, err)
		}
		t3 := time.Now()
		if exit.Usage.CPU != nil {
			cgroupCPU += *exit.Usage.CPU
		}
		if err := sb.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
		for i, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), time.Since(t3)} {
			steps[i] = append(steps[i], d)
		}
	}
	var self1, kids1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
	for i, name := range []string{"create", "assign", "run", "destroy"} {
		slices.Sort(steps[i])
		b.ReportMetric(float64(steps[i][len(steps[i])/2].Microseconds())/1000, "ms-"+name)
	}
	n := float64(len(steps[0]))
	b.ReportMetric(cpuMs(self0, self1)/n, "ms-cpu-worker")
	b.ReportMetric(cpuMs(kids0, kids1)/n, "ms-cpu-sandbox")
	if cgroupCPU > 0 {
		b.ReportMetric(float64(cgroupCPU.Microseconds())/1000/n, "ms-cpu-cgroup")
	}
}

func cpuMs(a, b syscall.Rusage) float64 {
	d := time.Duration(syscall.TimevalToNsec(b.Utime) - syscall.TimevalToNsec(a.Utime) + syscall.TimevalToNsec(b.Stime) - syscall.TimevalToNsec(a.Stime))
	return float64(d.Microseconds()) / 1000
}

// BenchPool measures jobs per second through a warm pool, as a worker runs them: parallel jobs
// at once, each a python3 `pass` taken from a pool of that many waiting sandboxes refilled two
// at a time, assigned, run and destroyed. It reports jobs/s and the median wait for a sandbox.
func BenchPool(b *testing.B, e Env, parallel int) {
	ctx, stop := context.WithCancel(b.Context())
	shape := Shape(e.Profiles["python3"])
	warm := pool.New(e.Provider, []sandbox.Shape{shape}, pool.Options{Size: parallel, Refills: 2})
	var wg sync.WaitGroup
	wg.Go(func() { warm.Run(ctx) })
	defer func() { stop(); wg.Wait() }()
	payload, _ := profile.Payload(job.Request{Code: "pass"})
	for warm.WaitingFor("python3") < parallel {
		time.Sleep(10 * time.Millisecond)
	}
	var mu sync.Mutex
	var waits []time.Duration
	jobs := make(chan struct{})
	errs := make(chan error, parallel)
	start := time.Now()
	var workers sync.WaitGroup
	for range parallel {
		workers.Go(func() {
			for range jobs {
				t0 := time.Now()
				sb, _, err := warm.Take(ctx, shape)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				waits = append(waits, time.Since(t0))
				mu.Unlock()
				err = sb.Assign(ctx, Job("bench"))
				if err == nil {
					var exit sandbox.Exit
					exit, err = sb.Run(ctx, bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{})
					if err == nil && exit.Code != 0 {
						err = fmt.Errorf("exit %d", exit.Code)
					}
				}
				if derr := sb.Destroy(context.WithoutCancel(ctx)); err == nil {
					err = derr
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	n := 0
	for b.Loop() {
		jobs <- struct{}{}
		n++
	}
	close(jobs)
	workers.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(waits)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "ms-take")
}
