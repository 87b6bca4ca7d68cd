package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runfleet/runfleet/job"
)

// pagedRun drives a pager on the bubble's fake clock: write is called with the pager's stdout and
// stderr writers, and every publish is recorded with its time.
func pagedRun(t *testing.T, b job.Bounds, write func(stdout, stderr writer)) (published []time.Time, pages int64, limit job.Reason) {
	t.Helper()
	p := newPager(func(_ context.Context, _ string, _, _ int64, _ []byte) error {
		published = append(published, time.Now()) // under the pager's lock
		return nil
	}, b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.run(ctx, ctx) })
	write(p.Writers(ctx))
	cancel()
	wg.Wait()
	_, _, pages, limit, err := p.finish(ctx)
	if err != nil {
		t.Fatalf("finish() error = %v", err)
	}
	return published, pages, limit
}

func TestPagePolicy(t *testing.T) {
	// The worker's defaults for a job that asks for the longest timeout.
	policy := job.DefaultPolicy()
	long := policy.Default
	long.Timeout = policy.Max.Timeout
	long.MaxPages = min(job.PagesNeeded(long.Timeout, long.OutputBytes, long.PageBytes), policy.Max.MaxPages)
	cases := []struct {
		name  string
		write func(stdout, stderr writer)
		check func(t *testing.T, start time.Time, published []time.Time, pages int64, limit job.Reason)
	}{
		{name: "a lone line is published one interval after it was written", write: func(stdout, _ writer) {
			_, _ = stdout.Write([]byte("hello\n"))
			time.Sleep(time.Second)
		}, check: func(t *testing.T, start time.Time, published []time.Time, pages int64, _ job.Reason) {
			if pages != 1 || published[0].Sub(start) != job.PageInterval {
				t.Errorf("published %d pages, the first after %v; want 1 after %v", pages, published[0].Sub(start), job.PageInterval)
			}
		}},
		{name: "a full page is published at once", write: func(stdout, _ writer) {
			_, _ = stdout.Write([]byte(strings.Repeat("x", 64<<10)))
		}, check: func(t *testing.T, start time.Time, published []time.Time, pages int64, _ job.Reason) {
			if pages != 1 || published[0] != start {
				t.Errorf("published %d pages, the first after %v; want 1 at once", pages, published[0].Sub(start))
			}
		}},
		{name: "a line every 100 ms for 5 minutes stays within the default max_pages", write: func(stdout, _ writer) {
			for range 3000 {
				_, _ = stdout.Write([]byte("progress line\n"))
				time.Sleep(100 * time.Millisecond)
			}
		}, check: func(t *testing.T, _ time.Time, _ []time.Time, pages int64, limit job.Reason) {
			if limit != "" || pages > long.MaxPages {
				t.Errorf("pages = %d, limit %q; want at most %d and no limit", pages, limit, long.MaxPages)
			}
			t.Logf("5 minutes of a line every 100 ms: %d pages (default max_pages %d)", pages, long.MaxPages)
		}},
		{name: "both streams chatty every 10 ms for 5 minutes", write: func(stdout, stderr writer) {
			for range 30000 {
				_, _ = stdout.Write([]byte("o\n"))
				_, _ = stderr.Write([]byte("e\n"))
				time.Sleep(10 * time.Millisecond)
			}
		}, check: func(t *testing.T, _ time.Time, published []time.Time, pages int64, limit job.Reason) {
			if limit != "" || pages > long.MaxPages {
				t.Errorf("pages = %d, limit %q; want at most %d and no limit", pages, limit, long.MaxPages)
			}
			// The last pair is finish's flush after the program ended, not a time cut.
			for i := 2; i < len(published)-2; i++ {
				if gap := published[i].Sub(published[i-2]); gap < job.PageInterval {
					t.Fatalf("pages %d and %d only %v apart: more than two pages per interval", i-2, i, gap)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				published, pages, limit := pagedRun(t, long, c.write)
				if len(published) == 0 {
					t.Fatal("nothing published")
				}
				c.check(t, start, published, pages, limit)
			})
		})
	}
}
