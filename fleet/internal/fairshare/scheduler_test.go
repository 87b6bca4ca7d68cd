package fairshare_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
)

// sim runs a scheduler on a simulated clock: slots run one job each, a tenant's job costs its
// cost in CPU and in wall time, and every tenant listed as flooding always has jobs waiting.
type sim struct {
	t     *testing.T
	now   time.Time
	s     *fairshare.Scheduler
	cost  map[string]time.Duration
	cpu   map[string]time.Duration // CPU settled per tenant since reset
	picks []string
}

func newSim(t *testing.T, weights map[string]float64, cost map[string]time.Duration) *sim {
	var pol tenant.Policies
	for name, w := range weights {
		pol.Set(name, tenant.Policy{Weight: w})
	}
	sm := &sim{t: t, now: time.Unix(1e9, 0), cost: cost, cpu: map[string]time.Duration{}}
	sm.s = fairshare.New(fairshare.Options{Policies: &pol, Now: func() time.Time { return sm.now }})
	return sm
}

func pair(tenant string) queue.Pair { return queue.Pair{Queue: "default", Tenant: tenant} }

type running struct {
	tenant string
	ends   time.Time
	job    *fairshare.Job
}

// run serves the flooding tenants on slots slots for d of simulated time.
func (sm *sim) run(slots int, d time.Duration) {
	ctx := context.Background()
	end := sm.now.Add(d)
	var busy []running
	for sm.now.Before(end) {
		for len(busy) < slots {
			g, err := sm.s.Pick(ctx, 1)
			if err != nil {
				sm.t.Fatal(err)
			}
			// A flooding tenant always has another job: the fetch brings one and it stays active.
			j := g.Fetched(ctx, 1, 0)[0]
			sm.s.Arrived(g.Pair, 0)
			busy = append(busy, running{tenant: g.Pair.Tenant, ends: sm.now.Add(sm.cost[g.Pair.Tenant]), job: j})
			sm.picks = append(sm.picks, g.Pair.Tenant)
		}
		first := 0
		for i, r := range busy {
			if r.ends.Before(busy[first].ends) {
				first = i
			}
		}
		r := busy[first]
		busy = append(busy[:first], busy[first+1:]...)
		sm.now = r.ends
		sm.cpu[r.tenant] += sm.cost[r.tenant]
		r.job.Done(ctx, sm.cost[r.tenant].Milliseconds())
	}
	for _, r := range busy {
		r.job.Done(ctx, sm.cost[r.tenant].Milliseconds())
	}
}

func (sm *sim) share(tenant string) float64 {
	var total time.Duration
	for _, c := range sm.cpu {
		total += c
	}
	return float64(sm.cpu[tenant]) / float64(total)
}

// TestSharesFollowWeightsInCPU: two tenants flooding get the fleet's CPU in proportion to their
// weights, whatever their jobs cost: CPU time is what is shared, not job counts.
func TestSharesFollowWeightsInCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]float64
		cost    map[string]time.Duration
		wantA   float64
	}{
		{"equal weights, equal costs", map[string]float64{"a": 1, "b": 1}, map[string]time.Duration{"a": 40 * time.Millisecond, "b": 40 * time.Millisecond}, 0.5},
		{"equal weights, a's jobs 3x as costly", map[string]float64{"a": 1, "b": 1}, map[string]time.Duration{"a": 120 * time.Millisecond, "b": 40 * time.Millisecond}, 0.5},
		{"weights 2:1, a's jobs 2x as costly", map[string]float64{"a": 2, "b": 1}, map[string]time.Duration{"a": 80 * time.Millisecond, "b": 40 * time.Millisecond}, 2.0 / 3},
		{"weights 1:3", map[string]float64{"a": 1, "b": 3}, map[string]time.Duration{"a": 50 * time.Millisecond, "b": 50 * time.Millisecond}, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sm := newSim(t, tc.weights, tc.cost)
			sm.s.Add(pair("a"), nil)
			sm.s.Add(pair("b"), nil)
			sm.run(2, 10*time.Second) // warm up: the estimates learn the costs
			clear(sm.cpu)
			sm.run(2, time.Minute)
			if got := sm.share("a"); math.Abs(got-tc.wantA)/tc.wantA > 0.05 {
				t.Errorf("a's CPU share over a minute = %.3f, want %.3f within 5%%", got, tc.wantA)
			}
		})
	}
}

// TestNewTenantIsServedAtOnce: a tenant whose first job comes while another floods is picked
// within the next picks, not after the other's backlog.
func TestNewTenantIsServedAtOnce(t *testing.T) {
	sm := newSim(t, nil, map[string]time.Duration{"a": 30 * time.Millisecond, "b": 30 * time.Millisecond})
	sm.s.Add(pair("a"), nil)
	sm.run(2, time.Minute)
	before := len(sm.picks)
	sm.s.Add(pair("b"), nil)
	sm.run(2, time.Second)
	for i, p := range sm.picks[before:] {
		if p == "b" {
			if i > 1 {
				t.Errorf("b picked at the %d-th pick after it came, want within 2", i+1)
			}
			return
		}
	}
	t.Errorf("b not picked in %d picks after it came", len(sm.picks)-before)
}

// TestIdleBanksNoCredit: a tenant that was idle while another ran alone does not take the fleet
// over when it comes back: it starts level with the one that ran.
func TestIdleBanksNoCredit(t *testing.T) {
	sm := newSim(t, nil, map[string]time.Duration{"a": 30 * time.Millisecond, "b": 30 * time.Millisecond})
	ctx := context.Background()
	sm.s.Add(pair("a"), nil)
	sm.s.Add(pair("b"), nil)
	// b's consumer turns out empty: it is idle while a floods for a minute.
	for {
		g, err := sm.s.Pick(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if g.Pair.Tenant == "b" {
			g.Fetched(ctx, 0, 0)
			break
		}
		g.Fetched(ctx, 1, 0)[0].Done(ctx, 30)
		sm.s.Arrived(g.Pair, 0)
	}
	sm.run(2, time.Minute)
	sm.s.Arrived(pair("b"), 0)
	before := len(sm.picks)
	sm.run(2, 3*time.Second)
	n := map[string]int{}
	for _, p := range sm.picks[before:] {
		n[p]++
	}
	if got := float64(n["b"]) / float64(n["a"]+n["b"]); got > 0.6 || got < 0.4 {
		t.Errorf("after coming back b took %.2f of the picks (%v), want about half", got, n)
	}
}

// TestPickWaitsForAnArrival: with nothing active, a pick waits until a job is announced.
func TestPickWaitsForAnArrival(t *testing.T) {
	s := fairshare.New(fairshare.Options{})
	ctx := context.Background()
	s.Add(pair("a"), nil)
	g, err := s.Pick(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	g.Fetched(ctx, 0, 0) // empty: a goes idle
	picked := make(chan *fairshare.Grant)
	go func() {
		g, err := s.Pick(ctx, 1)
		if err == nil {
			picked <- g
		}
		close(picked)
	}()
	select {
	case g := <-picked:
		t.Fatalf("Pick() = %v with every consumer idle, want it to wait", g.Pair)
	case <-time.After(50 * time.Millisecond):
	}
	s.Arrived(pair("a"), 0)
	g, ok := <-picked
	if !ok || g.Pair != pair("a") {
		t.Fatalf("Pick() after the arrival = %v; want a", ok)
	}
	g.Fetched(ctx, 1, 0) // the whole grant: a may hold more
	g, err = s.Pick(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	g.Fetched(ctx, 0, 0)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Pick(cctx, 1); err == nil {
		t.Error("Pick() on an ended context with nothing active returned no error")
	}
}

// TestShortFetchAfterAnnouncement: a fetch that comes back without the job just announced (the
// server counts it a moment after announcing it) leaves the pair to be fetched again at growing
// intervals, a bounded number of times; a fetch that brought the announced job is not repeated.
func TestShortFetchAfterAnnouncement(t *testing.T) {
	now := time.Unix(1e9, 0)
	s := fairshare.New(fairshare.Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	s.Add(pair("a"), nil)
	g, err := s.Pick(ctx, 1) // the pair's first fetch, with nothing announced
	if err != nil {
		t.Fatal(err)
	}
	g.Fetched(ctx, 0, 0)
	pickWithin := func(d time.Duration) bool {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		g, err = s.Pick(c, 2)
		return err == nil
	}
	if pickWithin(50 * time.Millisecond) {
		t.Fatal("a pair fetched empty with nothing announced was picked again, want it idle")
	}

	s.Arrived(pair("a"), 7)
	if !pickWithin(time.Second) {
		t.Fatal("an announced pair was not picked")
	}
	g.Fetched(ctx, 1, 7) // the announced job came: the pair is idle
	if pickWithin(50 * time.Millisecond) {
		t.Fatal("a pair whose fetch brought the announced job was picked again, want it idle")
	}

	s.Arrived(pair("a"), 9)
	rechecks := 0
	for pickWithin(time.Second) {
		g.Fetched(ctx, 0, 0) // the server has not counted job 9 yet
		now = now.Add(time.Second)
		rechecks++
		if rechecks > 10 {
			t.Fatal("the pair was picked again without end")
		}
	}
	if rechecks < 3 {
		t.Errorf("a pair was fetched %d times for one announced job that did not come, want a few", rechecks)
	}

	s.Arrived(pair("a"), 11)
	if !pickWithin(time.Second) {
		t.Fatal("an announced pair was not picked")
	}
	g.Fetched(ctx, 0, 0)
	if pickWithin(50 * time.Millisecond) {
		t.Fatal("a pair was fetched again before the recheck's time")
	}
	now = now.Add(time.Second)
	if !pickWithin(time.Second) {
		t.Fatal("a pair fetched empty just after its announcement was not fetched again")
	}
	g.Fetched(ctx, 1, 11) // the job came on the recheck
	now = now.Add(time.Second)
	if pickWithin(50 * time.Millisecond) {
		t.Error("a pair was fetched again after its announced job came")
	}
}
