package e2e

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestMaxRunningAcrossFleet: a tenant at max_running 2 on three workers of two slots each never
// has more than two jobs in a sandbox at once, from the settlements' start and finish times, also
// while one of the workers is killed with SIGKILL mid-job and another joins. The killed worker's
// job settles unknown and never runs again, its sandbox ends with it, and its Redis slots come
// back when its leases end: two jobs overlap again after it died.
func TestMaxRunningAcrossFleet(t *testing.T) {
	const tenantName, jobs = "capped", 16
	f := newFleet(t)
	f.setPolicy(tenantName, tenant.Policy{MaxRunning: 2})
	workers := map[string]*worker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		workers[id] = f.start(id) // --concurrency 2, --lease-ttl 2s: six slots, the bound is two
	}
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = f.submitAs(tenantName, job.Request{Language: "python3", Code: fmt.Sprintf("import time; time.sleep(1); print(%d)", i)})
	}

	// Once a few jobs ran, kill the worker that has just dispatched one: the job sleeps a second,
	// so it is running when the worker dies.
	var victim sandbox.Dispatch
	testenv.WaitFor(t, time.Minute, "a third job dispatched", func() bool {
		ds := slices.DeleteFunc(f.dispatchLog(), func(d sandbox.Dispatch) bool { return !slices.Contains(ids, d.JobID) })
		if len(ds) < 3 {
			return false
		}
		victim = slices.MaxFunc(ds, func(a, b sandbox.Dispatch) int { return a.At.Compare(b.At) })
		return true
	})
	w := workers[victim.Worker]
	pid := w.cmd.Process.Pid
	sandboxes := supervisors(pid)
	w.kill()
	killedAt := time.Now()
	// The job's code runs until its sandbox's cgroups hold no process but the supervisors: a
	// zygote's child, whose parent was the worker, is then a zombie the host's init reaps when it
	// will, and its supervisor, pid 1 of its namespace, exits only after that.
	testenv.WaitFor(t, 10*time.Second, "the killed worker's programs gone", func() bool {
		return onlySupervisorsLeft(pid, sandboxes)
	})
	stoppedAt := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the killed worker's sandboxes gone", func() bool {
		return !slices.ContainsFunc(sandboxes, alive)
	})
	goneAt := time.Now()
	t.Logf("killed %s running %s; its programs gone %v later, its %d sandboxes %v later", victim.Worker, victim.JobID,
		stoppedAt.Sub(killedAt).Round(time.Millisecond), len(sandboxes), goneAt.Sub(killedAt).Round(time.Millisecond))
	f.start("w4") // a worker joining removes the dead one's cgroups
	testenv.WaitFor(t, 30*time.Second, "the killed worker's cgroups removed", func() bool { return len(leftoverCgroups(pid)) == 0 })

	// Every job settles: with the dead worker's slots never given back, its tenant could run one
	// job at a time at most, or none.
	sts := f.settlements(ids, 2*time.Minute)
	f.tenantDrained(tenantName, time.Minute)
	disp, counts := f.dispatchLog(), f.settledCounts()
	ranOn := map[string][]string{}
	for _, d := range disp {
		ranOn[d.JobID] = append(ranOn[d.JobID], d.Worker)
	}
	var spans []span
	for _, id := range ids {
		st := sts[id]
		if n := counts[id]; n != 1 {
			t.Errorf("job %s: %d settlements stored, want 1", id, n)
		}
		if len(ranOn[id]) > 1 {
			t.Errorf("job %s dispatched %d times (on %v), want at most once", id, len(ranOn[id]), ranOn[id])
		}
		switch {
		case st.Status == job.StatusSucceeded:
			spans = append(spans, span{id, st.StartedAt, st.FinishedAt})
		case st.Status == job.StatusUnknown && slices.Equal(ranOn[id], []string{victim.Worker}):
			// Its outcome died with the worker: it may have run, so it never runs again. It ran
			// until its program was seen gone.
			d := disp[slices.IndexFunc(disp, func(d sandbox.Dispatch) bool { return d.JobID == id })]
			spans = append(spans, span{id, d.At, stoppedAt})
		case st.Status == job.StatusUnknown && len(ranOn[id]) == 0:
			// The killed worker had reserved it and not dispatched it yet: never run.
			t.Logf("job %s reserved by the killed worker settled unknown, not run", id)
		default:
			t.Errorf("job %s settled %s/%s by %s, dispatched on %v; want succeeded, or unknown if it was the killed worker's", id, st.Status, st.Reason, st.Worker, ranOn[id])
		}
	}
	if st := sts[victim.JobID]; st.Status != job.StatusUnknown {
		t.Errorf("the killed worker's job %s settled %s, want unknown", victim.JobID, st.Status)
	}

	most, at := maxOverlap(spans)
	t.Logf("%d jobs ran; at most %d at once (at %s)", len(spans), most, at.Format("15:04:05.000"))
	if most > 2 {
		t.Errorf("%d of the tenant's jobs ran at once, want at most max_running 2", most)
	}
	if most < 2 {
		t.Errorf("at most %d of the tenant's jobs ran at once: the bound 2 was never reached", most)
	}
	// After the dead worker's sandboxes ended: had its slots stayed taken, at most one would run.
	var after []span
	for _, s := range spans {
		if s.start.After(goneAt) {
			after = append(after, s)
		}
	}
	if n, _ := maxOverlap(after); n < 2 {
		t.Errorf("after the kill at most %d of %d jobs ran at once, want 2: the dead worker's slots did not come back", n, len(after))
	}
}

// TestTenantPolicyLive: a tenant's max_running changed in the bucket applies to a running worker,
// without a restart. At 1 its jobs run one at a time on a worker of two slots; raised to 3, jobs
// submitted afterwards run side by side.
func TestTenantPolicyLive(t *testing.T) {
	const tenantName = "live"
	f := newFleet(t)
	f.setPolicy(tenantName, tenant.Policy{MaxRunning: 1})
	f.start("w1")
	batch := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = f.submitAs(tenantName, job.Request{Language: "python3", Code: "import time; time.sleep(0.5)"})
		}
		return ids
	}
	serial := f.spansOf(f.settlements(batch(4), time.Minute))
	if n, at := maxOverlap(serial); n != 1 {
		t.Errorf("at max_running 1, %d jobs ran at once (at %s), want 1", n, at.Format("15:04:05.000"))
	}

	f.setPolicy(tenantName, tenant.Policy{MaxRunning: 3})
	changed := time.Now()
	// The contract gives the change 5 s to apply: batches are sent until one runs side by side,
	// and one sent later than that must.
	var overlapAt time.Time
	for overlapAt.IsZero() {
		sent := time.Now()
		spans := f.spansOf(f.settlements(batch(4), time.Minute))
		n, at := maxOverlap(spans)
		switch {
		case n > 2:
			t.Errorf("%d jobs ran at once on a worker of 2 slots", n)
		case n < 2 && sent.Sub(changed) > 5*time.Second:
			t.Fatalf("jobs sent %v after max_running was raised to 3 ran one at a time, want the change applied within 5 s", sent.Sub(changed).Round(time.Millisecond))
		}
		if n > 1 {
			overlapAt = at
		}
	}
	t.Logf("jobs ran side by side %v after max_running was raised", overlapAt.Sub(changed).Round(time.Millisecond))
}

// TestFairShareAcrossTenants: while tenant a has 200 jobs waiting, each of tenant b's jobs, sent
// one after another, starts after at most a handful of a's: b does not wait behind a's backlog
// in stream order.
func TestFairShareAcrossTenants(t *testing.T) {
	f := newFleet(t)
	// a's jobs last longer than a sandbox takes to start (cold under load: a few hundred ms), so
	// that what is counted is the scheduler's choice: with trivial jobs, the other slot ran many
	// of a's while b's own sandbox started, however fairly b was chosen.
	flood := make([]string, 200)
	for i := range flood {
		flood[i] = f.submitAs("a", job.Request{Language: "python3", Code: "import time; time.sleep(0.3)"})
	}
	f.start("w1") // --concurrency 2
	f.settlement(flood[0], time.Minute)
	var bs []job.Settlement
	for range 3 {
		bs = append(bs, f.settlement(f.submitAs("b", job.Request{Language: "python3", Code: "pass"}), time.Minute))
	}
	as := f.settlements(flood, 3*time.Minute)
	// Fair share begins once the fleet knows b: its consumer is made when discovery routes b's
	// first job, and a's jobs go on starting until then, as many as their rate allows (more with
	// zygotes). What is counted for each of b's jobs is a's that started after both b's job was
	// stored and b's consumer existed.
	bc, err := f.js.Consumer(t.Context(), f.client.Subjects().JobsStream(), f.client.Subjects().TenantConsumer(job.DefaultQueue, "b"))
	if err != nil {
		t.Fatal(err)
	}
	known := bc.CachedInfo().Created
	for i, b := range bs {
		if b.Status != job.StatusSucceeded {
			t.Fatalf("b's job %d settled %s/%s", i, b.Status, b.Reason)
		}
		from := b.QueuedAt
		if known.After(from) {
			from = known
		}
		ahead := 0
		for _, a := range as {
			if a.QueuedAt.Before(b.QueuedAt) && !a.StartedAt.Before(from) && a.StartedAt.Before(b.StartedAt) {
				ahead++
			}
		}
		t.Logf("b's job %d: waited %v (%v of it before b's consumer existed), %d of a's jobs started meanwhile", i,
			b.StartedAt.Sub(b.QueuedAt).Round(time.Millisecond), max(from.Sub(b.QueuedAt), 0).Round(time.Millisecond), ahead)
		if ahead > 8 {
			t.Errorf("b's job %d started after %d of a's jobs stored before it, once b's consumer existed; want at most 8 (in stream order it would be ~200)", i, ahead)
		}
	}
	// The test means something only if a still had jobs waiting when b's last one started.
	last := bs[len(bs)-1].StartedAt
	if !slices.ContainsFunc(flood, func(id string) bool { return as[id].StartedAt.After(last) }) {
		t.Errorf("a's backlog was gone before b's last job started: nothing was measured")
	}
}

// setPolicy writes tenant name's policy to the tenants bucket.
func (f *fleet) setPolicy(name string, p tenant.Policy) {
	f.t.Helper()
	kv, err := tenant.EnsureBucket(f.t.Context(), f.js, f.client.Subjects(), 1)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := tenant.Put(f.t.Context(), kv, name, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) submitAs(tenantName string, req job.Request) string {
	f.t.Helper()
	s, err := f.client.Submit(f.t.Context(), "", req, &runfleet.SubmitOptions{Tenant: tenantName})
	if err != nil {
		f.t.Fatal(err)
	}
	f.tenants.Store(s.ID, tenantName)
	return s.ID
}

// settlements waits for the settlement of every job of ids.
func (f *fleet) settlements(ids []string, within time.Duration) map[string]job.Settlement {
	f.t.Helper()
	out := make(map[string]job.Settlement, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var missing []string
	sem := make(chan struct{}, 32)
	ctx, cancel := contextWithTimeout(f.t, within)
	defer cancel()
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st, err := f.clientOf(id).Watch(ctx, id, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				missing = append(missing, id)
				return
			}
			out[id] = st
		})
	}
	wg.Wait()
	if len(missing) > 0 {
		f.t.Fatalf("%d of %d jobs not settled within %v: %v", len(missing), len(ids), within, missing)
	}
	return out
}

// tenantDrained is queueDrained for the default queue's consumer of tenantName.
func (f *fleet) tenantDrained(tenantName string, within time.Duration) {
	f.t.Helper()
	s := f.client.Subjects()
	testenv.WaitFor(f.t, within, "job messages of tenant "+tenantName+" acked", func() bool {
		c, err := f.js.Consumer(f.t.Context(), s.JobsStream(), s.TenantConsumer(job.DefaultQueue, tenantName))
		if err != nil {
			return false
		}
		info, err := c.Info(f.t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

func (f *fleet) dispatchLog() []sandbox.Dispatch {
	f.t.Helper()
	ds, err := sandbox.ReadDispatchLog(f.dlog)
	if err != nil {
		f.t.Fatal(err)
	}
	return ds
}

// span is the time a job held a sandbox.
type span struct {
	id         string
	start, end time.Time
}

// spansOf is the spans of settlements that ran.
func (f *fleet) spansOf(sts map[string]job.Settlement) []span {
	f.t.Helper()
	var out []span
	for id, st := range sts {
		if st.Status != job.StatusSucceeded {
			f.t.Errorf("job %s settled %s/%s, want succeeded", id, st.Status, st.Reason)
			continue
		}
		out = append(out, span{id, st.StartedAt, st.FinishedAt})
	}
	return out
}

// maxOverlap returns the most spans that overlap at one instant, and the first instant it is
// reached. A span that ends when another starts does not overlap it.
func maxOverlap(spans []span) (int, time.Time) {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) // ends first
	})
	n, most := 0, 0
	var at time.Time
	for _, e := range edges {
		n += e.delta
		if n > most {
			most, at = n, e.at
		}
	}
	return most, at
}
