package jobindex_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/job"
)

// BenchmarkList lists one page beside 100 and beside 100,000 kept jobs — the first page, one
// from the middle (by its cursor), one of a filter — each page as long in both: the two should
// cost the same, within 2×.
func BenchmarkList(b *testing.B) {
	statuses := []job.Status{job.StatusFailed, job.StatusUnknown, job.StatusSucceeded, job.StatusError}
	for _, kept := range []int{100, 100_000} {
		x := newIndex(b, jobindex.Options{})
		start := time.Now().Add(-24 * time.Hour)
		batch := make([]job.Listed, 0, 1000)
		for i := range kept {
			batch = append(batch, row(fmt.Sprintf("job-%07d", i), statuses[i%len(statuses)],
				fmt.Sprintf("q%d", i%4), fmt.Sprintf("t%d", i%10), start.Add(time.Duration(i)*time.Millisecond)))
			if len(batch) == cap(batch) || i == kept-1 {
				if err := x.Add(b.Context(), batch...); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		middle := fmt.Sprintf("%d.0", start.Add(time.Duration(kept/2)*time.Millisecond).UnixMilli())
		for _, tc := range []struct {
			name string
			q    job.ListQuery
		}{
			{"first", job.ListQuery{Limit: 50}},
			{"middle", job.ListQuery{Limit: 50, Cursor: middle}},
			{"filtered", job.ListQuery{Limit: 20, Status: job.StatusFailed, Queue: "q0"}},
		} {
			b.Run(fmt.Sprintf("kept=%d/%s", kept, tc.name), func(b *testing.B) {
				for b.Loop() {
					l, err := x.List(b.Context(), tc.q)
					if err != nil {
						b.Fatal(err)
					}
					if len(l.Jobs) != tc.q.Limit {
						b.Fatalf("a page of %d rows, want %d", len(l.Jobs), tc.q.Limit)
					}
				}
			})
		}
	}
}
