package runfleet_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// BenchmarkWatchLatency measures the time from a page's publish to a live watcher seeing it:
// version 2's watch (the stream's republish, no consumer) against version 1's (an ordered
// consumer on the job's results subjects), in the same run on the same stream. p50_us and
// p99_us are per page.
func BenchmarkWatchLatency(b *testing.B) {
	f := newV2Fleet(b, protocol.StreamOptions{})
	for _, row := range []struct {
		name  string
		watch func(ctx context.Context, id string, seen chan<- int64) error
	}{
		{"v2-republish", func(ctx context.Context, id string, seen chan<- int64) error {
			_, err := f.c.Watch(ctx, id, func(p runfleet.Page) error { seen <- p.Index; return nil })
			return err
		}},
		{"v1-consumer", func(ctx context.Context, id string, seen chan<- int64) error {
			cons, err := f.js.OrderedConsumer(ctx, f.s.ResultsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.s.Results("default", id)}})
			if err != nil {
				return err
			}
			it, err := cons.Messages()
			if err != nil {
				return err
			}
			defer it.Stop()
			stop := context.AfterFunc(ctx, it.Stop)
			defer stop()
			for {
				m, err := it.Next()
				if err != nil {
					return ctx.Err()
				}
				if m.Subject() == f.s.Settled("default", id) {
					return nil
				}
				i, _ := strconv.ParseInt(m.Headers().Get(job.HeaderPage), 10, 64)
				seen <- i
			}
		}},
	} {
		b.Run(row.name, func(b *testing.B) {
			id := job.NewID()
			f.submit(b, "q1", job.DefaultTenant, id)
			w := &writer{f: f, id: id, attempt: 1}
			seen := make(chan int64, 1)
			ctx, cancel := context.WithCancel(b.Context())
			var wg sync.WaitGroup
			var werr error
			wg.Go(func() { werr = row.watch(ctx, id, seen) })
			var lat []time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				if err := w.page(ctx, i, "x\n"); err != nil {
					b.Fatal(err)
				}
				if got := <-seen; got != int64(i) {
					b.Fatalf("saw page %d, want %d", got, i)
				}
				lat = append(lat, time.Since(start))
				i++
			}
			if err := w.settle(ctx, i); err != nil {
				b.Fatal(err)
			}
			wg.Wait()
			cancel()
			if werr != nil {
				b.Fatal(werr)
			}
			reportPercentiles(b, lat)
		})
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_us")
}

// BenchmarkConcurrentWaits holds RUNFLEET_BENCH_WAITS (default 10,000) watches of queued jobs on
// one connection, as a gateway holds its waiting requests, then settles every job: it reports
// the results stream's consumers while they wait (consumers, want 0), the Go heap per waiting
// watch (heap_B/wait), and the time from a settlement's publish to its watch returning (p50_us,
// p99_us; the settlements are published one after another, each timed from just before its
// publish). Run it with -benchtime=1x.
func BenchmarkConcurrentWaits(b *testing.B) {
	n := 10_000
	if s := envInt("RUNFLEET_BENCH_WAITS"); s > 0 {
		n = s
	}
	for b.Loop() {
		f := newV2Fleet(b, protocol.StreamOptions{})
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("wait%d", i)
		}
		for _, id := range ids {
			m := nats.NewMsg(f.s.Job("q1", job.DefaultTenant, id))
			m.Header.Set(job.HeaderMsgID, id)
			if _, err := f.js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		<-f.js.PublishAsyncComplete()

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(b.Context())
		done := make([]time.Time, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		base := f.nc.NumSubscriptions()
		for i, id := range ids {
			wg.Go(func() {
				_, errs[i] = f.c.Watch(ctx, id, nil)
				done[i] = time.Now()
			})
		}
		for deadline := time.Now().Add(5 * time.Minute); f.nc.NumSubscriptions() < base+n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d watches subscribed after 5 min", f.nc.NumSubscriptions()-base, n)
			}
		}
		runtime.GC()
		var during runtime.MemStats
		runtime.ReadMemStats(&during)
		consumers := f.consumers(b)

		settled := make([]time.Time, n)
		for i, id := range ids {
			m := nats.NewMsg(f.s.Settled("default", id))
			m.Data = fmt.Appendf(nil, `{"job_id":%q,"status":"succeeded"}`, id)
			settled[i] = time.Now()
			if _, err := f.js.PublishMsg(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		cancel()
		var lat []time.Duration
		for i := range ids {
			if errs[i] != nil {
				b.Fatalf("watch %d: %v", i, errs[i])
			}
			lat = append(lat, done[i].Sub(settled[i]))
		}
		b.ReportMetric(float64(consumers), "consumers")
		b.ReportMetric(float64(int64(during.HeapInuse)-int64(before.HeapInuse))/float64(n), "heap_B/wait")
		b.ReportMetric(float64(int64(during.StackInuse)-int64(before.StackInuse))/float64(n), "stack_B/wait")
		reportPercentiles(b, lat)
	}
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}
