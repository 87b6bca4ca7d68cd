package lease_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStoreFunc makes a store on a key space of its own, the function that ends one of its leases
// the way the lease's TTL would, without waiting for it, and one that keeps a job's record as it
// is now and returns the function that puts it back: a failover to a replica that missed every
// write in between.
type newStoreFunc func(t *testing.T) (*lease.Store, func(t *testing.T, id string), func(t *testing.T, id string) func(*testing.T))

// storeOn is a newStoreFunc on rdb, under a fresh prefix per call.
func storeOn(rdb redis.UniversalClient) newStoreFunc {
	n := 0
	return func(t *testing.T) (*lease.Store, func(*testing.T, string), func(*testing.T, string) func(*testing.T)) {
		n++
		keys := keyspace.New("t" + strconv.Itoa(n))
		s := lease.NewStore(rdb, lease.Options{Prefix: "t" + strconv.Itoa(n), TTL: 5 * time.Second})
		if err := s.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		expire := func(t *testing.T, id string) {
			t.Helper()
			if err := rdb.Del(t.Context(), keys.Lease("default", id)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		keep := func(t *testing.T, id string) func(*testing.T) {
			t.Helper()
			kept, err := rdb.Dump(t.Context(), keys.Record("default", id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T) {
				t.Helper()
				if err := rdb.RestoreReplace(t.Context(), keys.Record("default", id), 0, kept).Err(); err != nil {
					t.Fatal(err)
				}
				expire(t, id)
			}
		}
		return s, expire, keep
	}
}

// suite is every test of the scripts that holds on any topology.
var suite = []struct {
	name string
	run  func(*testing.T, newStoreFunc)
}{
	{"ClaimModes", testClaimModes},
	{"GenerationFences", testGenerationFences},
	{"ReleaseCountsFailures", testReleaseCountsFailures},
	{"ReleaseAfterTheLeaseRanOut", testReleaseAfterTheLeaseRanOut},
	{"SettleIsFenced", testSettleIsFenced},
	{"AdoptOnlyMovesForward", testAdoptOnlyMovesForward},
	{"LeaseIsSafeForConcurrentUse", testLeaseIsSafeForConcurrentUse},
}

func TestLease(t *testing.T) {
	newStore := storeOn(testenv.StartRedis(t).Client())
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore) })
	}
}

func claim(t *testing.T, s *lease.Store, id, owner string, d lease.Delivery) lease.Claim {
	t.Helper()
	if d.Count == 0 {
		d.Count, d.QueuedAt = 1, time.Now()
	}
	if d.Subject == "" {
		d.Subject = "runfleet.jobs.default.default." + id
	}
	c, err := s.Claim(t.Context(), "default", id, owner, d)
	if err != nil {
		t.Fatalf("Claim(%s) error = %v", id, err)
	}
	return c
}

func testClaimModes(t *testing.T, newStore newStoreFunc) {
	s, expire, _ := newStore(t)
	ctx := t.Context()
	earlier := lease.Delivery{Count: 2, QueuedAt: time.Now().Add(-time.Hour)}
	cases := []struct {
		name  string
		setup func(t *testing.T, id string) // what happened to the job before this claim
		d     lease.Delivery
		want  lease.Mode
	}{
		{name: "first delivery runs", setup: func(*testing.T, string) {}, want: lease.ModeRun},
		{name: "redelivery stored after epoch runs", setup: func(*testing.T, string) {},
			d: lease.Delivery{Count: 3, QueuedAt: time.Now().Add(time.Minute)}, want: lease.ModeRun},
		{name: "redelivery stored before epoch is record_lost", setup: func(*testing.T, string) {}, d: earlier, want: lease.ModeRecordLost},
		{name: "claimed but not reserved runs again", setup: func(t *testing.T, id string) {
			claim(t, s, id, "w1", lease.Delivery{})
			expire(t, id)
		}, want: lease.ModeRun},
		{name: "reserved is unknown", setup: func(t *testing.T, id string) {
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Reserve(ctx, "p", "d", "namespace"); err != nil {
				t.Fatal(err)
			}
			expire(t, id)
		}, want: lease.ModeUnknown},
		{name: "dispatched is unknown", setup: func(t *testing.T, id string) {
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Reserve(ctx, "p", "d", "namespace"); err != nil {
				t.Fatal(err)
			}
			if err := l.Associate(ctx, "sb-1"); err != nil {
				t.Fatal(err)
			}
			expire(t, id)
		}, want: lease.ModeUnknown},
		{name: "record_lost stays so", setup: func(t *testing.T, id string) {
			claim(t, s, id, "w1", earlier)
			expire(t, id)
		}, want: lease.ModeRecordLost},
		{name: "held by a live lease", setup: func(t *testing.T, id string) { claim(t, s, id, "w1", lease.Delivery{}) }, want: lease.ModeHeld},
		{name: "settled is acked", setup: func(t *testing.T, id string) {
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Settled(ctx, "succeeded"); err != nil {
				t.Fatal(err)
			}
		}, want: lease.ModeSettled},
		{name: "the same id from another subject is foreign", setup: func(t *testing.T, id string) {
			claim(t, s, id, "w1", lease.Delivery{Subject: "runfleet.jobs.other.default." + id})
			expire(t, id)
		}, want: lease.ModeForeign},
		{name: "the same id from another subject is foreign once settled", setup: func(t *testing.T, id string) {
			l := claim(t, s, id, "w1", lease.Delivery{Subject: "runfleet.jobs.default.acme." + id}).Lease
			if err := l.Settled(ctx, "succeeded"); err != nil {
				t.Fatal(err)
			}
		}, want: lease.ModeForeign},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "job-" + string(rune('a'+i))
			c.setup(t, id)
			got := claim(t, s, id, "w2", c.d)
			if got.Mode != c.want {
				t.Errorf("Claim().Mode = %s, want %s", got.Mode, c.want)
			}
		})
	}
}

func testGenerationFences(t *testing.T, newStore newStoreFunc) {
	s, expire, _ := newStore(t)
	ctx := t.Context()
	old := claim(t, s, "j", "w1", lease.Delivery{}).Lease
	expire(t, "j")
	cur := claim(t, s, "j", "w2", lease.Delivery{}).Lease
	if cur.Generation() <= old.Generation() {
		t.Fatalf("Generation() = %d, want > %d", cur.Generation(), old.Generation())
	}
	for name, err := range map[string]error{
		"extend":    old.Extend(ctx),
		"reserve":   old.Reserve(ctx, "p", "d", "namespace"),
		"associate": old.Associate(ctx, "sb"),
	} {
		if !errors.Is(err, lease.ErrLost) {
			t.Errorf("old %s error = %v, want ErrLost", name, err)
		}
	}
	if _, err := old.Release(ctx, true); !errors.Is(err, lease.ErrLost) {
		t.Errorf("old Release error = %v, want ErrLost", err)
	}
	if err := cur.Reserve(ctx, "p", "d", "namespace"); err != nil {
		t.Errorf("current Reserve error = %v", err)
	}
	if err := cur.Reserve(ctx, "p", "d", "namespace"); err != nil {
		t.Errorf("repeated Reserve error = %v, want it idempotent", err)
	}
	if err := cur.Associate(ctx, "sb"); err != nil {
		t.Errorf("Associate error = %v", err)
	}
	if err := cur.Reserve(ctx, "p", "d", "namespace"); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Reserve after Associate error = %v, want ErrLost", err)
	}
}

func testReleaseCountsFailures(t *testing.T, newStore newStoreFunc) {
	s, _, _ := newStore(t)
	for want := 1; want <= 3; want++ {
		c := claim(t, s, "flaky", "w1", lease.Delivery{})
		if c.Mode != lease.ModeRun || c.Failures != want-1 {
			t.Fatalf("Claim() = %s with %d failures, want run with %d", c.Mode, c.Failures, want-1)
		}
		got, err := c.Lease.Release(t.Context(), true)
		if err != nil || got != want {
			t.Fatalf("Release() = %d, %v; want %d", got, err, want)
		}
	}
}

// A failover can outlast a lease whose holder reserved and then could not associate or
// release. The release is then refused, whatever the record says: a failover may have lost a
// later claim and that claim's settlement with it (issue 38 item 3), so the record stays in
// doubt and the next claim is unknown, which reads the job's settlement and its dispatch marker
// before anything runs (package runner).
func testReleaseAfterTheLeaseRanOut(t *testing.T, newStore newStoreFunc) {
	s, expire, keep := newStore(t)
	ctx := t.Context()
	cases := []struct {
		name    string
		between func(t *testing.T, id string) // after the lease ran out, before the release
		assoc   bool                          // the holder associated a sandbox first
	}{
		{name: "no claim since", between: func(*testing.T, string) {}},
		{name: "claimed since", between: func(t *testing.T, id string) {
			claim(t, s, id, "w2", lease.Delivery{Count: 2, QueuedAt: time.Now()})
			expire(t, id)
		}},
		{name: "a claim since, lost by a failover", between: func(t *testing.T, id string) {
			// B claims (unknown), stores its unknown settlement and dies; a replica without B's
			// writes is promoted: the record is as A left it, at A's generation and owner.
			failover := keep(t, id)
			if got := claim(t, s, id, "w2", lease.Delivery{Count: 2, QueuedAt: time.Now()}).Mode; got != lease.ModeUnknown {
				t.Fatalf("B's Claim().Mode = %s, want %s", got, lease.ModeUnknown)
			}
			failover(t)
		}},
		{name: "associated", assoc: true, between: func(*testing.T, string) {}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "ranout-" + strconv.Itoa(i)
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Reserve(ctx, "p", "d", "namespace"); err != nil {
				t.Fatal(err)
			}
			if c.assoc {
				if err := l.Associate(ctx, "sb"); err != nil {
					t.Fatal(err)
				}
			}
			expire(t, id)
			c.between(t, id)
			if _, err := l.Release(ctx, true); !errors.Is(err, lease.ErrLost) {
				t.Errorf("Release() after the lease ran out error = %v, want ErrLost", err)
			}
			if got := claim(t, s, id, "w3", lease.Delivery{Count: 3, QueuedAt: time.Now()}); got.Mode != lease.ModeUnknown {
				t.Errorf("next Claim().Mode = %s, want %s: a release after the lease ran out re-opened the job", got.Mode, lease.ModeUnknown)
			}
		})
	}
}

func TestTrustWindowClosesBeforeRedisTTL(t *testing.T) {
	srv := testenv.StartRedis(t)
	now := time.Now()
	clock := func() time.Time { return now }
	s := lease.NewStore(srv.Client(), lease.Options{TTL: 10 * time.Second, Now: clock})
	l := claim(t, s, "j", "w1", lease.Delivery{}).Lease
	now = now.Add(8*time.Second + time.Millisecond)
	if l.Valid() {
		t.Errorf("Valid() = true at 8s of a 10s lease with 2s drift, want false")
	}
	if err := l.Reserve(context.Background(), "p", "d", "x"); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Reserve() outside the window error = %v, want ErrLost", err)
	}
}

func TestRecordLostAfterRedisRestart(t *testing.T) {
	srv := testenv.StartRedis(t)
	s := lease.NewStore(srv.Client(), lease.Options{})
	ctx := t.Context()
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	queued := time.Now()
	l := claim(t, s, "j", "w1", lease.Delivery{Count: 1, QueuedAt: queued}).Lease
	if err := l.Reserve(ctx, "p", "d", "x"); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	time.Sleep(10 * time.Millisecond)
	s2 := lease.NewStore(srv.Client(), lease.Options{Skew: time.Millisecond})
	if err := s2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s2, "j", "w2", lease.Delivery{Count: 2, QueuedAt: queued}).Mode; got != lease.ModeRecordLost {
		t.Errorf("Claim() after an empty restart = %s, want %s", got, lease.ModeRecordLost)
	}
}

func testSettleIsFenced(t *testing.T, newStore newStoreFunc) {
	s, expire, _ := newStore(t)
	ctx := t.Context()
	old := claim(t, s, "j", "w1", lease.Delivery{}).Lease
	expire(t, "j")
	cur := claim(t, s, "j", "w2", lease.Delivery{}).Lease
	if err := old.Settled(ctx, "succeeded"); !errors.Is(err, lease.ErrLost) {
		t.Errorf("old Settled() error = %v, want ErrLost", err)
	}
	if rec, _ := s.Lookup(ctx, "default", "j"); rec["state"] == "settled" {
		t.Errorf("record after a stale settle = %v, want it unsettled", rec)
	}
	if err := cur.Settled(ctx, "failed"); err != nil {
		t.Errorf("current Settled() error = %v", err)
	}
	if rec, _ := s.Lookup(ctx, "default", "j"); rec["state"] != "settled" || rec["status"] != "failed" {
		t.Errorf("record = %v, want settled failed", rec)
	}
	if held := s.Held(ctx, "default", "j"); held {
		t.Errorf("Held() after settling = true, want the lease ended")
	}
}

func testAdoptOnlyMovesForward(t *testing.T, newStore newStoreFunc) {
	s, expire, _ := newStore(t)
	ctx := t.Context()
	cases := []struct {
		name       string
		setup      func(t *testing.T, id string) *lease.Lease // returns the adopter's own lease, if any
		adopt      string
		wantStatus string
	}{
		{name: "no record", setup: func(*testing.T, string) *lease.Lease { return nil }, adopt: "unknown", wantStatus: "unknown"},
		{name: "dispatched by a dead worker, adopted by the next holder", setup: func(t *testing.T, id string) *lease.Lease {
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Reserve(ctx, "p", "d", "x"); err != nil {
				t.Fatal(err)
			}
			expire(t, id)
			return claim(t, s, id, "w2", lease.Delivery{Count: 2, QueuedAt: time.Now()}).Lease
		}, adopt: "succeeded", wantStatus: "succeeded"},
		{name: "settled stays as it is", setup: func(t *testing.T, id string) *lease.Lease {
			l := claim(t, s, id, "w1", lease.Delivery{}).Lease
			if err := l.Settled(ctx, "succeeded"); err != nil {
				t.Fatal(err)
			}
			return nil
		}, adopt: "unknown", wantStatus: "succeeded"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "adopt-" + string(rune('a'+i))
			held := c.setup(t, id)
			before, _ := s.Lookup(ctx, "default", id)
			if err := s.Adopt(ctx, "default", id, c.adopt, held); err != nil {
				t.Fatalf("Adopt() error = %v", err)
			}
			rec, _ := s.Lookup(ctx, "default", id)
			if rec["state"] != "settled" || rec["status"] != c.wantStatus || rec["gen"] != before["gen"] {
				t.Errorf("record = %v (before %v), want settled %s with the generation unchanged", rec, before, c.wantStatus)
			}
			if s.Held(ctx, "default", id) {
				t.Errorf("Held() after Adopt = true, want no lease")
			}
			if held != nil && held.Valid() {
				t.Errorf("adopter's lease Valid() = true, want ended")
			}
		})
	}
}

// TestExtendNeverOutlivesTheWindow pauses Redis under a lease: Extend returns by the time the
// trust window closes, not when a TCP timeout decides.
func TestExtendNeverOutlivesTheWindow(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := lease.NewStore(rdb, lease.Options{TTL: 2 * time.Second})
	l := claim(t, s, "j", "w1", lease.Delivery{}).Lease
	srv.Pause()
	defer srv.Resume()
	window := l.Remaining()
	start := time.Now()
	err := l.Extend(t.Context())
	took := time.Since(start)
	if err == nil {
		t.Fatal("Extend() against a paused Redis = nil, want an error")
	}
	if took > window+time.Second {
		t.Errorf("Extend() returned after %v, want by the window's end (%v)", took, window)
	}
	if l.Valid() {
		t.Errorf("Valid() after the window = true")
	}
}

// testLeaseIsSafeForConcurrentUse has writers check the window while a heartbeat extends it; the
// race detector is the assertion.
func testLeaseIsSafeForConcurrentUse(t *testing.T, newStore newStoreFunc) {
	s, _, _ := newStore(t)
	l := claim(t, s, "j", "w1", lease.Delivery{}).Lease
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = l.Valid()
					_ = l.Remaining()
				}
			}
		})
	}
	for range 50 {
		if err := l.Extend(t.Context()); err != nil {
			t.Errorf("Extend() error = %v", err)
			break
		}
	}
	close(stop)
	wg.Wait()
	if !l.Valid() {
		t.Error("Valid() after extends = false")
	}
}
