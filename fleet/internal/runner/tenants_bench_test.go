package runner_test

import (
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
)

// benchScale reads RUNFLEET_BENCH_FULL: unset, the tenant benchmarks run a short version that
// keeps `make bench` quick; set to 1, the lengths docs/protocol.md's targets name (a minute, a
// backlog of 10,000).
func benchScale() (backlog int, every time.Duration, n int, window time.Duration) {
	if os.Getenv("RUNFLEET_BENCH_FULL") == "1" {
		return 10000, time.Second, 60, time.Minute
	}
	return 1000, 250 * time.Millisecond, 20, 15 * time.Second
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkTenantWait: tenant b submits a trivial job every interval, first on an idle worker
// (the baseline), then beside tenant a's backlog of trivial jobs, on the same worker
// (concurrency 2, namespace sandboxes); b's wait is from stored to started.
//
//	RUNFLEET_BENCH_FULL=1 go test -run XXX -bench TenantWait -benchtime 1x ./internal/runner/
func BenchmarkTenantWait(b *testing.B) {
	backlog, every, n, _ := benchScale()
	for b.Loop() {
		f := newFleet(b)
		f.startWorker(workerOpts{concurrency: 2, warm: 2})
		waits := func() []time.Duration {
			var d []time.Duration
			var ids []string
			tick := time.NewTicker(every)
			for range n {
				ids = append(ids, f.submitAs("b", job.Request{Language: "python3", Code: "pass"}))
				<-tick.C
			}
			tick.Stop()
			for _, id := range ids {
				st := f.wait(id).st
				d = append(d, st.StartedAt.Sub(st.QueuedAt))
			}
			return d
		}
		alone := waits()
		for range backlog {
			f.submitAs("a", job.Request{Language: "python3", Code: "pass"})
		}
		beside := waits()
		b.ReportMetric(float64(percentile(alone, 0.5).Microseconds())/1000, "alone-p50-ms")
		b.ReportMetric(float64(percentile(alone, 0.99).Microseconds())/1000, "alone-p99-ms")
		b.ReportMetric(float64(percentile(beside, 0.5).Microseconds())/1000, "beside-p50-ms")
		b.ReportMetric(float64(percentile(beside, 0.99).Microseconds())/1000, "beside-p99-ms")
		b.ReportMetric(float64(percentile(beside, 0.99))/float64(percentile(alone, 0.99)), "p99-ratio")
		f.shutdown()
	}
}

// BenchmarkTenantShares: tenants a (weight 2, jobs about twice as costly in CPU) and b (weight 1)
// both flood the fleet; their shares of the sandbox CPU time settled within the window, after a
// warm-up, should be 2:1. With one worker (concurrency 2), and with two (concurrency 1 each):
// each worker keeps its own account of what it ran, and the fleet's shares are the sum of theirs.
//
//	RUNFLEET_BENCH_FULL=1 go test -run XXX -bench TenantShares -benchtime 1x ./internal/runner/
func BenchmarkTenantShares(b *testing.B) {
	_, _, _, window := benchScale()
	spin := func(ms int) string {
		return "import time\nt = time.process_time()\nwhile time.process_time() - t < " + strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) + ": pass"
	}
	for _, workers := range []int{1, 2} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			for b.Loop() {
				f := newFleet(b)
				pol, _ := f.followPolicies(map[string]tenant.Policy{"a": {Weight: 2}, "b": {Weight: 1}})
				per := int(window/(40*time.Millisecond)) + 50 // more than the window can run
				ids := map[string][]string{}
				for range per {
					ids["a"] = append(ids["a"], f.submitAs("a", job.Request{Language: "python3", Code: spin(80)}))
					ids["b"] = append(ids["b"], f.submitAs("b", job.Request{Language: "python3", Code: spin(40)}))
				}
				start := time.Now()
				var stops []func()
				for w := range workers {
					f.startWorker(workerOpts{id: "w" + strconv.Itoa(w+1), concurrency: 2 / workers, warm: 2 / workers, tenants: pol})
					stops = append(stops, f.shutdown)
				}
				from, to := start.Add(window/4), start.Add(window/4+window)
				time.Sleep(time.Until(to)) // a benchmark's measuring window, not a wait for an event
				for _, stop := range stops {
					stop()
				}
				cpu := map[string]float64{}
				jobs := map[string]int{}
				for tenantName, list := range ids {
					c := f.as(tenantName)
					for _, id := range list {
						st, err := c.Settlement(b.Context(), id)
						if err != nil || st.Usage == nil || st.Usage.CPUMS == nil || st.FinishedAt.Before(from) || st.FinishedAt.After(to) {
							continue
						}
						cpu[tenantName] += float64(*st.Usage.CPUMS)
						jobs[tenantName]++
					}
				}
				if cpu["a"]+cpu["b"] == 0 {
					b.Fatal("no job settled in the window")
				}
				b.ReportMetric(cpu["a"]/(cpu["a"]+cpu["b"]), "a-cpu-share")
				b.ReportMetric(cpu["a"]/max(cpu["b"], 1), "a/b-cpu")
				b.ReportMetric(float64(jobs["a"])/float64(max(jobs["b"], 1)), "a/b-jobs")
			}
		})
	}
}

// BenchmarkTenantCost: the fleet's jobs/s with tenants against a single tenant, on one worker
// (concurrency 2, namespace sandboxes, trivial python3 jobs). Each round floods the worker with a
// block of jobs of one tenant and a block spread over ten in turn, in alternating order, and
// compares their rates (submit of the first to the last's finish): blocks seconds apart see the
// same machine, whose speed drifts over minutes on a shared VM.
//
//	RUNFLEET_BENCH_FULL=1 go test -run '^$' -bench TenantCost -benchtime 12x ./internal/runner/
func BenchmarkTenantCost(b *testing.B) {
	const tenants = 10
	block := 50
	if os.Getenv("RUNFLEET_BENCH_FULL") == "1" {
		block = 200
	}
	f := newFleet(b)
	f.startWorker(workerOpts{concurrency: 2, warm: 2})
	rate := func(spread int) float64 {
		start := time.Now()
		ids := make([]string, block)
		for i := range ids {
			ids[i] = f.submitAs("t"+strconv.Itoa(i%spread), job.Request{Language: "python3", Code: "pass"})
		}
		var last time.Time
		for _, id := range ids {
			st := f.wait(id).st
			if st.Status != job.StatusSucceeded {
				b.Fatalf("job %s: %s %s", id, st.Status, st.Reason)
			}
			if st.FinishedAt.After(last) {
				last = st.FinishedAt
			}
		}
		return float64(block) / last.Sub(start).Seconds()
	}
	rate(tenants) // every tenant's consumer made, the pool warm
	var ratios []float64
	var one, many float64
	round := 0
	for b.Loop() {
		var r1, rn float64
		if round%2 == 0 {
			r1, rn = rate(1), rate(tenants)
		} else {
			rn, r1 = rate(tenants), rate(1)
		}
		round++
		one, many = one+r1, many+rn
		ratios = append(ratios, rn/r1)
	}
	mean, se := meanSE(ratios)
	b.ReportMetric(one/float64(len(ratios)), "1-tenant-jobs/s")
	b.ReportMetric(many/float64(len(ratios)), "10-tenants-jobs/s")
	b.ReportMetric(mean, "ratio")
	b.ReportMetric(se, "ratio-se")
}

// meanSE is the mean of xs and its standard error.
func meanSE(xs []float64) (mean, se float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sq / float64(len(xs)-1) / float64(len(xs)))
}
