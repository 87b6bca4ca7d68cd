package runfleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestWatchNeverShowsRefused: a page the stream refused (a fenced worker's write, behind the
// job's last sequence) is never shown, to a watch that follows live or to one that starts after,
// although a plain subscription on the results subjects receives it; a message forged on the
// republish subject is ignored; and the watch holds no consumer.
func TestWatchNeverShowsRefused(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const id = "fenced-job"
	f.submit(t, "q1", job.DefaultTenant, id)
	raw, err := f.nc.SubscribeSync(f.s.Results("default", id))
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{f: f, id: id, attempt: 2}
	if err := w.page(ctx, 0, "a"); err != nil {
		t.Fatal(err)
	}

	first := make(chan struct{})
	var live []string
	var liveErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, liveErr = f.c.Watch(ctx, id, func(p runfleet.Page) error {
			live = append(live, string(p.Data))
			if len(live) == 1 {
				close(first)
			}
			return nil
		})
	})
	<-first
	// Anyone may publish on the republish subjects: what the stream did not send is ignored.
	if err := f.nc.Publish(f.s.WatchPage("default", id), []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if n := f.consumers(t); n != 0 {
		t.Errorf("results stream consumers during a watch = %d, want 0", n)
	}
	fenced := &writer{f: f, id: id, attempt: 1} // still expects nothing stored
	if err := fenced.page(ctx, 0, "fenced"); err == nil {
		t.Fatal("the stream stored a page behind the job's last sequence")
	}
	if err := w.page(ctx, 1, "b"); err != nil {
		t.Fatal(err)
	}
	if err := w.settle(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if liveErr != nil {
		t.Fatalf("live Watch() error = %v", liveErr)
	}
	var after []string
	if _, err := f.c.Watch(ctx, id, func(p runfleet.Page) error { after = append(after, string(p.Data)); return nil }); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]string{"live": live, "after": after} {
		if !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s watch pages = %q, want [a b]", name, got)
		}
	}
	var plain []string
	for {
		m, err := raw.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("plain subscription: %v after %q", err, plain)
		}
		plain = append(plain, string(m.Data))
		if m.Subject == f.s.Settled("default", id) {
			break
		}
	}
	if !slices.Contains(plain, "fenced") {
		t.Errorf("a plain subscription on the results subjects got %q: the refused page did not reach it, so this test shows nothing", plain)
	}
}

// TestWatchNoPageLostOrDoubled: watches started at many moments of a job printing 1,000 pages,
// live and after it settled, each see every page once, in order; WatchFrom resumes after a page;
// no watch holds a consumer.
func TestWatchNoPageLostOrDoubled(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const id, pages, every = "chatty-job", 1000, 25
	f.submit(t, "q1", job.DefaultTenant, id)
	w := &writer{f: f, id: id, attempt: 1}

	type seen struct {
		from    int
		indexes []int64
		err     error
	}
	var (
		mu      sync.Mutex
		watches []*seen
		wg      sync.WaitGroup
		resume  uint64 // the sequence of page 499
	)
	start := func(from int, after uint64) {
		s := &seen{from: from}
		mu.Lock()
		watches = append(watches, s)
		mu.Unlock()
		wg.Go(func() {
			_, s.err = f.c.WatchFrom(ctx, id, after, func(p runfleet.Page) error {
				s.indexes = append(s.indexes, p.Index)
				return nil
			})
		})
	}
	for i := range pages {
		if i%every == 0 {
			start(0, 0)
		}
		if err := w.page(ctx, i, fmt.Sprintf("%d\n", i)); err != nil {
			t.Fatal(err)
		}
		if i == pages/2-1 {
			resume = w.last
			start(pages/2, resume)
		}
		if i == pages/2 {
			if n := f.consumers(t); n != 0 {
				t.Errorf("results stream consumers during %d watches = %d, want 0", pages/2/every, n)
			}
		}
	}
	if err := w.settle(ctx, pages); err != nil {
		t.Fatal(err)
	}
	start(0, 0)
	start(pages/2, resume)
	wg.Wait()
	for n, s := range watches {
		if s.err != nil {
			t.Errorf("watch %d error = %v", n, s.err)
			continue
		}
		want := make([]int64, 0, pages)
		for i := s.from; i < pages; i++ {
			want = append(want, int64(i))
		}
		if !slices.Equal(s.indexes, want) {
			t.Errorf("watch %d (from page %d) saw %d pages, want %d in order, once each (first differences: %v)", n, s.from, len(s.indexes), len(want), firstDiff(s.indexes, want))
		}
	}
}

// firstDiff describes where got departs from want.
func firstDiff(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d got %d want %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// TestExpiredPages: pages live for ResultsMaxAge, the settlement for the job's record
// (Retention): once the pages are gone, Settlement still returns the settlement, a lookup says
// the pages expired, and a watch returns the settlement with ErrExpired instead of waiting.
func TestExpiredPages(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{ResultsMaxAge: time.Second, Retention: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const id = "settled-long-ago"
	f.submit(t, "q1", job.DefaultTenant, id)
	w := &writer{f: f, id: id, attempt: 1, ttl: time.Second}
	for i := range 2 {
		if err := w.page(ctx, i, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.settle(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := f.c.Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.PagesExpired {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("pages with a 1 s TTL still stored after a minute")
		}
		time.Sleep(100 * time.Millisecond) // waiting on the server's expiry, which Lookup reports
	}
	st, err := f.c.Watch(ctx, id, func(runfleet.Page) error { return errors.New("an expired page was shown") })
	if !errors.Is(err, runfleet.ErrExpired) || st.Status != job.StatusSucceeded {
		t.Errorf("Watch() = %v, %v, want the settlement and ErrExpired", st.Status, err)
	}
	if st, err := f.c.Settlement(ctx, id); err != nil || st.Status != job.StatusSucceeded {
		t.Errorf("Settlement() after the pages expired = %v, %v, want the settlement", st.Status, err)
	}
	s, err := f.js.Stream(ctx, f.s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.Metadata[job.MetadataPageTTL] != "1s" {
		t.Errorf("results stream MaxAge %v, page TTL %q, want 1h and 1s", cfg.MaxAge, cfg.Metadata[job.MetadataPageTTL])
	}
}

// TestWatchBackstop: a watch whose subscription gets nothing (here the stream republishes
// nothing, as when a new subscription's interest has not reached a cluster's other servers)
// still sees every page and the settlement, through its periodic re-read.
func TestWatchBackstop(t *testing.T) {
	f := newV2Fleet(t, protocol.StreamOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := f.js.Stream(ctx, f.s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.RePublish = nil
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	const id = "unrepublished"
	f.submit(t, "q1", job.DefaultTenant, id)
	started := make(chan struct{})
	var got []int64
	var st job.Settlement
	var werr error
	var wg sync.WaitGroup
	wg.Go(func() {
		st, werr = f.c.Watch(ctx, id, func(p runfleet.Page) error {
			got = append(got, p.Index)
			if p.Index == 0 {
				close(started)
			}
			return nil
		})
	})
	w := &writer{f: f, id: id, attempt: 1}
	if err := w.page(ctx, 0, "a"); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := w.page(ctx, 1, "b"); err != nil {
		t.Fatal(err)
	}
	if err := w.settle(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if werr != nil || st.Status != job.StatusSucceeded || !slices.Equal(got, []int64{0, 1}) {
		t.Errorf("Watch() = %v, %v with pages %v, want succeeded with pages [0 1]", st.Status, werr, got)
	}
}
