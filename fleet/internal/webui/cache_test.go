package webui

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestPerMinute counts jobs per minute from a real job index: a final minute is counted once and
// kept (a row indexed into it later shows after chartRecount), the minute under way every time.
func TestPerMinute(t *testing.T) {
	x := jobindex.New(testenv.StartRedis(t).Client(), jobindex.Options{})
	nc := testenv.StartNATS(t).Conn()
	subjects, _ := job.NewSubjects("")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, nc, subjects, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	}()
	insp, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{o: Options{Inspector: insp}}

	now := time.Now()
	past := now.Add(-30 * time.Minute)
	add := func(id string, st job.Status, q string, at time.Time) {
		t.Helper()
		if err := x.Add(t.Context(), job.Listed{JobID: id, Status: st, Queue: q, Tenant: "acme", SettledAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	add("a", job.StatusSucceeded, "q1", past)
	add("b", job.StatusFailed, "q2", past)
	add("c", job.StatusSucceeded, "q1", now)
	views := []chartView{{}, {Queue: "q1", Tenant: "acme"}}
	read := func(at time.Time) [][][]int64 {
		t.Helper()
		var out [][][]int64
		// The index answers once it serves: the first count may find no responder yet.
		testenv.WaitFor(t, 10*time.Second, "counts", func() bool {
			out, err = u.perMinute(t.Context(), views, at)
			return err == nil
		})
		return out
	}
	minute := func(nowAt, at time.Time) int {
		first := nowAt.Truncate(time.Minute).Add(-(chartMinutes - 1) * time.Minute)
		return int(at.Truncate(time.Minute).Sub(first) / time.Minute)
	}
	sum := func(c [][]int64) (n [2]int64) { // succeeded, failed over the hour
		for _, m := range c {
			n[0] += m[0]
			n[1] += m[1]
		}
		return n
	}
	got := read(now)
	if len(got) != 2 || len(got[0]) != chartMinutes {
		t.Fatalf("perMinute = %d views of %d minutes, want 2 of %d", len(got), len(got[0]), chartMinutes)
	}
	if m := got[0][minute(now, past)]; m[0] != 1 || m[1] != 1 {
		t.Errorf("the whole view's minute of a and b = %v, want 1 succeeded, 1 failed", m)
	}
	if n := sum(got[0]); n != [2]int64{2, 1} {
		t.Errorf("the whole view's hour = %v, want [2 1]", n)
	}
	if n := sum(got[1]); n != [2]int64{2, 0} {
		t.Errorf("q1's hour = %v, want [2 0]", n)
	}
	// A row indexed late into a final minute is not counted again until chartRecount; one of the
	// minute under way is.
	add("late", job.StatusSucceeded, "q1", past)
	add("d", job.StatusSucceeded, "q1", now)
	if n := sum(read(now)[1]); n != [2]int64{3, 0} {
		t.Errorf("q1's hour again = %v, want [3 0]: the minute under way counted again, the final one kept", n)
	}
	later := now.Add(chartRecount)
	if n := sum(read(later)[1]); n != [2]int64{4, 0} {
		t.Errorf("q1's hour after chartRecount = %v, want [4 0]", n)
	}
	if len(u.chart.minutes) != 2 {
		t.Errorf("the cache holds %d views, want the 2 drawn", len(u.chart.minutes))
	}
}
