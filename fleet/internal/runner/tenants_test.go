package runner_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// followPolicies writes each of policies to the fleet's tenants bucket and returns a live view
// of it, followed until the test ends.
func (f *fleet) followPolicies(policies map[string]tenant.Policy) (*tenant.Policies, func(string, tenant.Policy)) {
	t := f.t
	t.Helper()
	kv, err := tenant.EnsureBucket(t.Context(), f.js, f.subjects, 1)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, p tenant.Policy) {
		if err := tenant.Put(context.Background(), kv, name, p); err != nil {
			t.Error(err)
		}
	}
	for name, p := range policies {
		put(name, p)
	}
	var pol tenant.Policies
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = pol.Follow(ctx, kv, slog.New(slog.NewTextHandler(t.Output(), nil))) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-pol.Loaded():
	case <-time.After(30 * time.Second):
		t.Fatal("tenant policies not loaded in 30 s")
	}
	return &pol, put
}

// maxOverlap is the most settlements whose [started_at, finished_at] overlap at one instant.
func maxOverlap(sts []job.Settlement) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, st := range sts {
		if !st.StartedAt.IsZero() && !st.FinishedAt.IsZero() {
			edges = append(edges, edge{st.StartedAt, 1}, edge{st.FinishedAt, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// TestNewTenantNotBehindBacklog: a tenant's job that comes while another tenant has hundreds
// waiting starts next, not after them (one consumer per queue served in stream order would run
// all 300 first).
func TestNewTenantNotBehindBacklog(t *testing.T) {
	f := newFleet(t)
	var backlog []string
	for range 300 {
		backlog = append(backlog, f.submitAs("a", job.Request{Language: "python3", Code: "pass"}))
	}
	f.startWorker(workerOpts{concurrency: 2})
	if r := f.wait(backlog[0]); r.st.Status != job.StatusSucceeded {
		t.Fatalf("a's first job settled %s", r.st.Status)
	}
	b := f.wait(f.submitAs("b", job.Request{Language: "python3", Code: "pass"})).st
	if b.Status != job.StatusSucceeded {
		t.Fatalf("b's job settled %s %s", b.Status, b.Detail)
	}
	// Every job of a's that started while b's waited started ahead of it.
	ahead := 0
	for _, id := range backlog {
		st, err := f.client.Settlement(t.Context(), id)
		if err != nil {
			break // not settled: it started after b's, as every later one
		}
		if st.StartedAt.After(b.QueuedAt) && st.StartedAt.Before(b.StartedAt) {
			ahead++
		}
	}
	if ahead > 8 {
		t.Errorf("%d of a's jobs started while b's waited, want at most 8 (the next picks while its consumer is made; in stream order all 300)", ahead)
	}
	t.Logf("a's jobs started while b's waited: %d; b waited %v", ahead, b.StartedAt.Sub(b.QueuedAt))
}

// TestMaxRunningApplies: a tenant at max_running 1 runs one job at a time on a worker with three
// slots, and when its policy is raised, without a restart, jobs run side by side.
func TestMaxRunningApplies(t *testing.T) {
	f := newFleet(t)
	pol, put := f.followPolicies(map[string]tenant.Policy{"acme": {MaxRunning: 1}})
	f.startWorker(workerOpts{concurrency: 3, tenants: pol, running: true})
	runAll := func(n int) []job.Settlement {
		var ids []string
		for range n {
			ids = append(ids, f.submitAs("acme", job.Request{Language: "python3", Code: "import time; time.sleep(0.4)"}))
		}
		var sts []job.Settlement
		for _, id := range ids {
			r := f.wait(id)
			if r.st.Status != job.StatusSucceeded {
				t.Fatalf("job %s settled %s %s", id, r.st.Status, r.st.Detail)
			}
			sts = append(sts, r.st)
		}
		return sts
	}
	if got := maxOverlap(runAll(4)); got != 1 {
		t.Errorf("at max_running 1: %d jobs ran at once, want 1", got)
	}
	put("acme", tenant.Policy{MaxRunning: 3})
	testenv.WaitFor(t, 10*time.Second, "the raised policy seen", func() bool { return pol.Of("acme").MaxRunning == 3 })
	if got := maxOverlap(runAll(6)); got < 2 || got > 3 {
		t.Errorf("at max_running 3 on 3 slots: %d jobs ran at once, want 2 or 3", got)
	}
}
