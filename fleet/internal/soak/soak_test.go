package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// duration is how long the load and the faults last: RUNFLEET_SOAK, else 3 minutes.
func duration(t *testing.T) time.Duration {
	v := os.Getenv("RUNFLEET_SOAK")
	if v == "" {
		return 3 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("RUNFLEET_SOAK=%q: want a positive Go duration such as 30m", v)
	}
	return d
}

// window is a fault's span: from the moment it struck to the moment the fleet had its part back.
type window struct {
	kind       string
	start, end time.Time
	what       string
}

// TestSoak: see the package documentation.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs for minutes")
	}
	d := duration(t)
	s := newStack(t)
	kv, err := tenant.EnsureBucket(t.Context(), s.js, s.subjects, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenant.Put(t.Context(), kv, hostileTenant, tenant.Policy{MaxQueued: hostileMaxQueued}); err != nil {
		t.Fatal(err)
	}
	// a lives through the run: its resources are the ones that must stay flat. b is the one
	// SIGKILLed, and started again under a new id each time.
	a := s.startWorker("soak-a")
	b := s.startWorker("soak-b-0")
	a.started(t, 2*time.Minute)
	b.started(t, 2*time.Minute)
	s.epochsSettled()

	l, sub, err := newLoad(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	// Also when a wait below fails the test: the load stops before the services do.
	t.Cleanup(func() {
		stop()
		wg.Wait()
		_ = sub.Unsubscribe()
	})
	var errMu sync.Mutex
	var loadErrs []error
	run := func(f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				errMu.Lock()
				loadErrs = append(loadErrs, err)
				errMu.Unlock()
			}
		})
	}
	run(l.follow)
	for _, name := range goodTenants {
		run(func(ctx context.Context) error { return l.good(ctx, name) })
	}
	run(l.hostile)

	// The faults take turns, one each interval: every few minutes each in a 30-minute run.
	interval := max(20*time.Second, d/30)
	sampleEvery := max(10*time.Second, d/20)
	began := time.Now()
	since := func() time.Duration { return time.Since(began).Round(time.Second) }
	var samples []sample
	var faults []window
	killed := map[string]time.Time{} // worker id → when it was SIGKILLed
	tenants := append(slices.Clone(goodTenants), hostileTenant)
	kill := func() {
		victim := b
		victim.kill()
		killed[victim.id] = time.Now()
		b = s.startWorker(fmt.Sprintf("soak-b-%d", len(killed)))
		took := b.started(t, 2*time.Minute)
		faults = append(faults, window{"kill", killed[victim.id], time.Now(),
			fmt.Sprintf("SIGKILLed %s, started %s, which said so %v later", victim.id, b.id, took.Round(time.Millisecond))})
	}
	deletions := 0
	deleteConsumers := func() {
		name := tenants[deletions%len(tenants)]
		deletions++
		names := []string{s.subjects.Discovery(job.DefaultQueue), s.subjects.TenantConsumer(job.DefaultQueue, name)}
		start := time.Now()
		for _, c := range names {
			if err := s.js.DeleteConsumer(t.Context(), s.subjects.JobsStream(), c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("delete consumer %s: %v", c, err)
			}
		}
		testenv.WaitFor(t, 2*time.Minute, "the deleted consumers made again", func() bool {
			for _, c := range names {
				if _, err := s.js.Consumer(t.Context(), s.subjects.JobsStream(), c); err != nil {
					return false
				}
			}
			return true
		})
		faults = append(faults, window{"consumers", start, time.Now(), "deleted the discovery consumer and " + name + "'s"})
	}
	failover := func() {
		s.replicaInSync(3 * time.Minute)
		start := time.Now()
		old := s.redis[s.master].Addr
		promoted := s.failover()
		back := s.replicaInSync(3 * time.Minute)
		faults = append(faults, window{"failover", start, time.Now(),
			fmt.Sprintf("SIGKILLed master %s: promotion seen after %v, the old master a replica in sync %v later", old, promoted.Round(time.Millisecond), back.Round(time.Millisecond))})
	}
	turns := []func(){kill, deleteConsumers, failover}
	sampleAll := func() {
		for _, w := range []*worker{a, b} {
			select {
			case <-w.done:
				t.Fatalf("worker %s ended on its own (%v):\n%s", w.id, w.cmd.ProcessState, lastLines(w.log.String(), 40))
			default:
			}
			sm, err := w.sample(t.Context(), since())
			if err != nil {
				t.Logf("%7s  %v", since(), err)
				continue
			}
			samples = append(samples, sm)
			t.Logf("%v", sm)
		}
	}
	nextFault, nextSample, end := began.Add(interval), began, began.Add(d)
	for turn := 0; time.Now().Before(end); {
		if !time.Now().Before(nextSample) {
			sampleAll()
			nextSample = nextSample.Add(sampleEvery)
		}
		if !time.Now().Before(nextFault) && time.Now().Before(end) {
			turns[turn%len(turns)]()
			turn++
			f := faults[len(faults)-1]
			t.Logf("%7s  %s: %s (%v)", since(), f.kind, f.what, f.end.Sub(f.start).Round(time.Millisecond))
			nextFault = time.Now().Add(interval)
		}
		time.Sleep(min(time.Until(nextSample), time.Until(nextFault), time.Until(end)))
	}
	stop()
	wg.Wait()
	_ = sub.Unsubscribe()
	loadTime := time.Since(began)
	for _, err := range loadErrs {
		t.Errorf("load: %v", err)
	}
	sampleAll()
	loadSamples := len(samples)

	// Every job settles, and every delivery is acked: nothing more can be stored.
	want := l.submitted()
	ids := slices.Sorted(maps.Keys(want))
	waited := time.Now()
	counts := waitSettled(t, s, ids, 10*time.Minute)
	for _, name := range tenants {
		tenantDrained(t, s, name, 5*time.Minute)
	}
	drain := time.Since(waited)
	sampleAll()

	sts, err := readSettlements(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	disp, err := sandbox.CountDispatches(s.dlog)
	if err != nil {
		t.Fatal(err)
	}
	results, err := s.js.Stream(t.Context(), s.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}

	type tally struct{ lost, ranTwice, settledTwice, atKill, atFailover int }
	var n tally
	statuses := map[string]map[string]int{}
	waits := map[string][]time.Duration{}
	for _, id := range ids {
		e := want[id]
		if statuses[e.tenant] == nil {
			statuses[e.tenant] = map[string]int{}
		}
		if disp[id] > 1 {
			n.ranTwice++
			t.Errorf("job %s (%s) reached a sandbox %d times", id, e.kind, disp[id])
		}
		if c := counts[id]; c > 1 {
			n.settledTwice++
			t.Errorf("job %s (%s) settled %d times", id, e.kind, c)
		}
		if len(sts[id]) == 0 {
			n.lost++
			continue // waitSettled said so
		}
		st := sts[id][0]
		statuses[e.tenant][string(st.Status)+"/"+string(st.Reason)]++
		switch {
		case e.reason != "":
			if st.Status != job.StatusRejected || st.Reason != e.reason || disp[id] != 0 {
				t.Errorf("job %s (%s) settled %s/%s (%s) with %d dispatches, want rejected/%s and none", id, e.kind, st.Status, st.Reason, st.Detail, disp[id], e.reason)
			}
		case st.Status == job.StatusSucceeded:
			if disp[id] != 1 {
				t.Errorf("job %s (%s) succeeded with %d dispatches, want 1", id, e.kind, disp[id])
			}
			waits[e.tenant] = append(waits[e.tenant], st.StartedAt.Sub(st.QueuedAt))
		case st.Status == job.StatusUnknown:
			switch at := unknownAt(t, results, s.subjects, id, st, killed, faults); at {
			case "kill":
				n.atKill++
			case "failover":
				n.atFailover++
			default:
				t.Errorf("job %s (%s) settled unknown (%s: %s) and %s; the workers logged:\n%s", id, e.kind, st.Reason, st.Detail, at, s.linesAbout(id))
			}
		default:
			t.Errorf("job %s (%s) settled %s/%s (%s), want succeeded, or unknown at a kill", id, e.kind, st.Status, st.Reason, st.Detail)
		}
	}
	failovers := 0
	for _, f := range faults {
		if f.kind == "failover" {
			failovers++
		}
	}
	if most := failovers * 2 * concurrency; n.atFailover > most {
		t.Errorf("%d jobs settled unknown at %d failovers, want at most %d (every slot of the fleet at each)", n.atFailover, failovers, most)
	}

	// The figures, for the README and the note.
	kinds := map[string]int{}
	for _, e := range want {
		k, _, _ := strings.Cut(e.kind, ":")
		kinds[e.tenant+" "+k]++
	}
	settled := 0
	for _, id := range ids {
		if counts[id] > 0 {
			settled++
		}
	}
	t.Logf("soak of %v (faults every %v): %d messages submitted, %d settled, %.1f settlements/s over the load; drained %v after the load stopped",
		d, interval, len(ids), settled, float64(settled)/loadTime.Seconds(), drain.Round(time.Second))
	t.Logf("submitted: %v; the client refused %d floods at max_queued %d", kinds, l.refused, hostileMaxQueued)
	for _, name := range tenants {
		t.Logf("tenant %-7s settled %v; queue wait of its jobs that ran: %s", name, statuses[name], percentiles(waits[name]))
	}
	t.Logf("lost %d, ran twice %d, settled twice %d; unknown at a worker's kill %d, at a failover %d", n.lost, n.ranTwice, n.settledTwice, n.atKill, n.atFailover)
	var kindsOfFault []string
	for _, f := range faults {
		kindsOfFault = append(kindsOfFault, f.kind)
	}
	t.Logf("faults: %d (%s)", len(faults), strings.Join(kindsOfFault, ", "))
	t.Logf("resources over time:\n%s", table(samples))

	flat(t, a.id, samples[:loadSamples], sampleEvery)
}

// flat fails t when worker id's resources grew, from its first sample in full load to its last
// under load, by more than a constant plus a share of the jobs it settled meanwhile: a leak per
// job shows as growth with the job count, whatever the run's length.
func flat(t *testing.T, id string, samples []sample, warmup time.Duration) {
	t.Helper()
	var mine []sample
	for _, sm := range samples {
		if sm.worker == id && sm.at >= warmup {
			mine = append(mine, sm)
		}
	}
	if len(mine) < 2 {
		t.Errorf("worker %s: %d samples under load, want at least 2", id, len(mine))
		return
	}
	first, last := mine[0], mine[len(mine)-1]
	jobs := last.settled - first.settled
	t.Logf("worker %s from %v to %v, %d jobs: rss %+.1f MiB, goroutines %+d, fds %+d",
		id, first.at, last.at, jobs, float64(last.rss-first.rss)/(1<<20), last.goroutines-first.goroutines, last.fds-first.fds)
	if limit := first.goroutines + 64 + jobs/50; last.goroutines > limit {
		t.Errorf("worker %s: %d goroutines after %d jobs, from %d; want at most %d", id, last.goroutines, jobs, first.goroutines, limit)
	}
	if limit := first.fds + 32 + jobs/100; last.fds > limit {
		t.Errorf("worker %s: %d open files after %d jobs, from %d; want at most %d", id, last.fds, jobs, first.fds, limit)
	}
	if limit := first.rss + 96<<20 + int64(jobs)*(16<<10); last.rss > limit {
		t.Errorf("worker %s: RSS %d MiB after %d jobs, from %d MiB; want at most %d MiB", id, last.rss>>20, jobs, first.rss>>20, limit>>20)
	}
}

// unknownAt says which fault an unknown settlement of job id is owed to: "kill" when a worker
// SIGKILLed later stored its dispatch marker, "failover" when the marker was stored before a
// failover began and the job settled after it (it was running when the master died); else why not.
func unknownAt(t *testing.T, results jetstream.Stream, subjects job.Subjects, id string, st job.Settlement, killed map[string]time.Time, faults []window) string {
	t.Helper()
	m, err := results.GetLastMsgForSubject(t.Context(), subjects.Dispatched("*", id)) // ids are unique across the soak's tenants
	if err != nil {
		return fmt.Sprintf("has no dispatch marker (%v)", err)
	}
	_, by, _ := strings.Cut(m.Header.Get(job.HeaderMsgID), ".gate.")
	if at, ok := killed[by]; ok && m.Time.Before(at) {
		return "kill"
	}
	for _, f := range faults {
		if f.kind == "failover" && m.Time.Before(f.end) && st.SettledAt.After(f.start) {
			return "failover"
		}
	}
	return fmt.Sprintf("its marker was stored by %s at %s, which no kill or failover explains", by, m.Time.Format(time.TimeOnly))
}

// waitSettled waits until every job of ids has a settlement stored and returns how many each has;
// it fails t, after within, naming the jobs still without one.
func waitSettled(t *testing.T, s *stack, ids []string, within time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		counts, err := settledCounts(t.Context(), s)
		var missing []string
		for _, id := range ids {
			if counts[id] == 0 {
				missing = append(missing, id)
			}
		}
		if err == nil && len(missing) == 0 {
			return counts
		}
		if time.Now().After(deadline) {
			t.Errorf("lost: %d of %d jobs without a settlement %v after the load stopped (%v): %.20q", len(missing), len(ids), within, err, missing)
			return counts
		}
		time.Sleep(time.Second)
	}
}

// settledCounts is how many settlements each job has stored.
func settledCounts(ctx context.Context, s *stack) (map[string]int, error) {
	st, err := s.js.Stream(ctx, s.subjects.ResultsStream())
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.subjects.Settled("*", "*")))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for subj, n := range info.State.Subjects {
		out[settledID(s.subjects, subj)] = int(n)
	}
	return out, nil
}

// settledID is the id of the job whose settlement subject is subject; the soak's ids are unique
// across its tenants.
func settledID(s job.Subjects, subject string) string {
	_, id, _, _ := s.ParseResult(subject)
	return id
}

// tenantDrained waits until the default queue's consumer of tenant name has nothing left to
// deliver or ack.
func tenantDrained(t *testing.T, s *stack, name string, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, "job messages of tenant "+name+" acked", func() bool {
		c, err := s.js.Consumer(t.Context(), s.subjects.JobsStream(), s.subjects.TenantConsumer(job.DefaultQueue, name))
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// readSettlements reads every settlement stored, in order, per job.
func readSettlements(ctx context.Context, s *stack) (map[string][]job.Settlement, error) {
	out := map[string][]job.Settlement{}
	c, err := s.js.OrderedConsumer(ctx, s.subjects.ResultsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.subjects.Settled("*", "*")}})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var st job.Settlement
			if err := json.Unmarshal(m.Data(), &st); err != nil {
				return nil, fmt.Errorf("settlement on %s: %w", m.Subject(), err)
			}
			id := settledID(s.subjects, m.Subject())
			out[id] = append(out[id], st)
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if got == 0 {
			return out, nil
		}
	}
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("p50 %v, p95 %v, max %v (%d jobs)", at(0.5), at(0.95), ds[len(ds)-1].Round(time.Millisecond), len(ds))
}

func table(samples []sample) string {
	var b strings.Builder
	for _, sm := range samples {
		fmt.Fprintf(&b, "  %v\n", sm)
	}
	return b.String()
}
