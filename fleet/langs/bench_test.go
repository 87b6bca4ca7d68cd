package langs_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// BenchmarkLanguages runs each manifest's test program on the namespace provider (the langs root
// fs with RUNFLEET_TEST_LANGS=1, else the suite's), from the payload in to the exit: the compile
// and the run, no sandbox creation (a warm pool takes that off the job's path). It reports the
// median and the slowest run besides the mean, and python3's empty program's as the baseline.
func BenchmarkLanguages(b *testing.B) {
	root := langsRoot(b)
	s, _, err := profile.LoadDir(".", profile.Set{"python3": profile.Builtin(root, "")["python3"]}, root, "")
	if err != nil {
		b.Fatal(err)
	}
	p := namespaceProvider(b)
	for _, name := range s.Names() {
		prof := s[name]
		code, stdin := "pass", ""
		if prof.Test != nil {
			code, stdin = prof.Test.Code, prof.Test.Stdin
		}
		b.Run(name, func(b *testing.B) {
			var runs []time.Duration
			for b.Loop() {
				b.StopTimer()
				d := job.DefaultPolicy().Default
				limits := sandbox.Limits{Timeout: d.Timeout + prof.CompileTimeout, MemoryBytes: d.MemoryBytes, Pids: d.Pids, CPUs: 1}
				ctx := context.Background()
				sb, err := p.Create(ctx, sandbox.Shape{Profile: prof, WorkspaceBytes: 64 << 20, TmpBytes: 256 << 20, Limits: limits})
				if err != nil {
					b.Fatal(err)
				}
				if err := sb.Assign(ctx, sandbox.Job{ID: "bench", Attempt: 1, Worker: "bench", Limits: limits}); err != nil {
					b.Fatal(err)
				}
				payload, _ := profile.Payload(job.Request{Code: code, Stdin: stdin})
				var out, errb bytes.Buffer
				b.StartTimer()
				start := time.Now()
				exit, err := sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
				runs = append(runs, time.Since(start))
				b.StopTimer()
				if err != nil || exit.Code != 0 {
					b.Fatalf("Run() = %+v, %v: %s", exit, err, errb.String())
				}
				if err := sb.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(runs)
			b.ReportMetric(float64(runs[len(runs)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(runs[len(runs)-1].Microseconds())/1000, "max-ms")
		})
	}
}
