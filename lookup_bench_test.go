package runfleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// BenchmarkLookup measures a lookup (Client.Lookup: three direct gets) of an id the fleet never
// accepted and of the oldest waiting job, beside 0, 10,000 and 100,000 waiting jobs spread over
// a fixed 4 queues × 4 tenants, then beside 1,000 tenants of one queue: the wildcard on the job's
// subject walks the distinct (queue, tenant) pairs, never the waiting jobs. Compare the rows of
// one run; waiting=0 is the baseline.
func BenchmarkLookup(b *testing.B) {
	f := newV2Fleet(b, protocol.StreamOptions{})
	f.submit(b, "q0", job.DefaultTenant, "oldest")
	waiting := 0
	for _, level := range []int{0, 10_000, 100_000} {
		f.fill(b, waiting, level, 4, 4)
		waiting = level
		benchLookups(b, f, fmt.Sprintf("waiting=%d", level))
	}
	t := newV2Fleet(b, protocol.StreamOptions{})
	t.submit(b, "q0", job.DefaultTenant, "oldest")
	t.fill(b, 0, 10_000, 1, 1000)
	benchLookups(b, t, "tenants=1000,waiting=10000")
}

func benchLookups(b *testing.B, f *v2Fleet, name string) {
	b.Run("unknown/"+name, func(b *testing.B) {
		for b.Loop() {
			if _, err := f.c.Lookup(b.Context(), "never-accepted"); !errors.Is(err, runfleet.ErrNotFound) {
				b.Fatal(err)
			}
		}
	})
	b.Run("oldest/"+name, func(b *testing.B) {
		for b.Loop() {
			if info, err := f.c.Lookup(b.Context(), "oldest"); err != nil || info.State != runfleet.JobQueued {
				b.Fatal(info.State, err)
			}
		}
	})
}

// fill stores jobs from..to-1 round-robin over queues × tenants, asynchronously.
func (f *v2Fleet) fill(b testing.TB, from, to, queues, tenants int) {
	b.Helper()
	for i := from; i < to; i++ {
		m := nats.NewMsg(f.s.Job(fmt.Sprintf("q%d", i%queues), fmt.Sprintf("t%d", i/queues%tenants), fmt.Sprintf("w%d", i)))
		m.Header.Set(job.HeaderMsgID, fmt.Sprintf("w%d", i))
		m.Data = []byte(`{"language":"python3","code":"print(1)"}`)
		if _, err := f.js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-b.Context().Done():
		b.Fatal(b.Context().Err())
	}
}
