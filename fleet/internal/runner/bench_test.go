package runner_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func reportMedian(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "ms-median")
	}
}

// BenchmarkTrivialJob is the end-to-end latency of `pass` in python3, publish to settlement,
// through JetStream, Redis and the namespace provider, next to the same interpreter in the same
// kind of sandbox without the queue (go test -bench TrivialJob -benchtime 50x ./internal/runner/).
func BenchmarkTrivialJob(b *testing.B) {
	testenv.NeedRoot(b)
	profiles := profile.Builtin(testenv.RootFS(b), "")
	b.Run("bare-sandbox", func(b *testing.B) {
		p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test"})
		if err != nil {
			testenv.Missing(b, "namespace provider: %v", err)
		}
		b.Cleanup(func() { _ = p.Close() })
		payload, _ := profile.Payload(job.Request{Code: "pass"})
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			limits := sandbox.Limits{Timeout: 10 * time.Second, MemoryBytes: 256 << 20, Pids: 64}
			sb, err := p.Create(b.Context(), sandbox.Shape{Profile: profiles["python3"], Limits: limits})
			if err != nil {
				b.Fatal(err)
			}
			if err := sb.Assign(b.Context(), sandbox.Job{ID: "bench", Limits: limits}); err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Run(b.Context(), bytes.NewReader(payload), &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
				b.Fatal(err)
			}
			if err := sb.Destroy(context.Background()); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportMedian(b, ds)
	})
	b.Run("queued-job", func(b *testing.B) {
		f := newFleet(b)
		f.startWorker(workerOpts{concurrency: 1})
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			r := f.run(job.Request{Language: "python3", Code: "pass"})
			if r.st.Status != job.StatusSucceeded {
				b.Fatalf("status %s", r.st.Status)
			}
			ds = append(ds, time.Since(start))
		}
		reportMedian(b, ds)
	})
}
