package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// The failover tests lose a Redis master under two workers of two slots each and check that no
// job runs twice: each job settles once, reaches a sandbox at most once (the dispatch log), and
// only a job that reached a sandbox and was running when the master went may settle unknown. Reservations wait for a
// replica (WAIT), so a promoted replica holds every dispatch; the killed master is restarted once
// the failover is seen, as a supervisor would, and rejoins as a replica (until then each
// reservation finds no replica, its job is released undispatched without counting a failure, and
// the workers claim nothing: noreplica_test.go). --max-failures is raised so that Redis errors
// while the master is down cannot turn a job into error.

const (
	failoverSlots = 4 // two workers, --concurrency 2
	sentinelName  = "runfleet"
)

// replArgs start a redis-server that serves a replica at once (no 5 s wait for more replicas
// before a diskless sync).
var replArgs = []string{"--repl-diskless-sync-delay", "0"}

// failoverWorkers starts the two workers on rdb (a client of the same Redis as redisURL), with
// extra flags after the tests' own, and returns once their key space's epoch is older than the
// claim's skew allowance (2 s): a job stored sooner and redelivered without a record is taken for
// one whose record was lost, which would blur what the tests count. It returns the workers' HTTP
// addresses (/readyz, /metrics).
func failoverWorkers(t *testing.T, f *fleet, redisURL string, rdb redis.UniversalClient, extra ...string) []string {
	t.Helper()
	var bases []string
	for _, id := range []string{"fo-a", "fo-b"} {
		base := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
		bases = append(bases, base)
		f.start(id, append([]string{"--redis-url", redisURL, "--max-failures", "50", "--lease-ttl", "3s",
			"--listen", strings.TrimPrefix(base, "http://")}, extra...)...)
	}
	var epoch time.Time
	testenv.WaitFor(t, time.Minute, "the workers set their epochs", func() bool {
		ms, err := rdb.Get(t.Context(), keyspace.New("runfleet").Epoch(keyspace.Buckets-1)).Int64()
		epoch = time.UnixMilli(ms)
		return err == nil
	})
	testenv.WaitFor(t, time.Minute, "the epochs older than the skew allowance", func() bool {
		now, err := rdb.Time(t.Context()).Result()
		return err == nil && now.After(epoch.Add(lease.DefaultSkew+500*time.Millisecond))
	})
	return bases
}

// failoverJobs submits n jobs that sleep between minSleep and maxSleep seconds, so that some
// run at any moment.
func failoverJobs(f *fleet, n int, minSleep, maxSleep float64) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3",
			Code: fmt.Sprintf("import time; time.sleep(%.2f); print('job %d')", minSleep+rand.Float64()*(maxSleep-minSleep), i)})
	}
	return ids
}

// jobCount is n, or RUNFLEET_FAILOVER_JOBS when set (to run longer by hand).
func jobCount(n int) int {
	if s := os.Getenv("RUNFLEET_FAILOVER_JOBS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	return n
}

// settledNow is the set of jobs whose settlement is stored.
func (f *fleet) settledNow() map[string]bool {
	out := map[string]bool{}
	for id := range f.settledCounts() {
		out[id] = true
	}
	return out
}

// checkAfterFailover waits for every job, fails on a lost job, a second dispatch or a second
// settlement (tally: so a job settled before the loss is never settled again), on a job settled
// unknown that never reached a sandbox, and on more jobs made unknown since the loss than could
// have been running then (slots).
func checkAfterFailover(t *testing.T, f *fleet, ids []string, settledAtLoss map[string]bool, within time.Duration) {
	t.Helper()
	statuses := tally(t, f, ids, within)
	var unknown, before []string
	disp := f.dispatches()
	for _, id := range ids {
		ctx, cancel := contextWithTimeout(t, 30*time.Second)
		st, err := f.client.Settlement(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("settlement of %s: %v", id, err)
		}
		switch {
		case st.Status == job.StatusUnknown && settledAtLoss[id]:
			// Its one settlement (a second fails the tally) was stored before the loss: a worker
			// too loaded to extend its lease in time, not the failover.
			before = append(before, id)
		case st.Status == job.StatusUnknown && disp[id] == 0:
			// The dispatch marker decides "may have run": a job that never reached a sandbox
			// runs, whatever Redis lost.
			t.Errorf("job %s settled unknown (%s: %s) and never reached a sandbox", id, st.Reason, st.Detail)
		case st.Status == job.StatusUnknown:
			unknown = append(unknown, id)
		case st.Status == job.StatusSucceeded && disp[id] != 1:
			t.Errorf("job %s succeeded with %d dispatches, want 1", id, disp[id])
		case st.Status != job.StatusSucceeded:
			t.Errorf("job %s settled %s (%s), want succeeded or unknown", id, st.Status, st.Reason)
		}
	}
	t.Logf("%d jobs, %d settled before the loss; statuses %v; unknown since the loss: %v; unknown before it: %v",
		len(ids), len(settledAtLoss), statuses, unknown, before)
	if len(unknown) > failoverSlots {
		t.Errorf("%d jobs unknown, want at most the %d that can run at once", len(unknown), failoverSlots)
	}
}

// TestSentinelFailover: a master, a replica and three Sentinels; the master is SIGKILLed while
// jobs run, Sentinel promotes the replica, and the workers follow it.
func TestSentinelFailover(t *testing.T) {
	master := testenv.StartRedis(t, replArgs...)
	replica := testenv.StartReplica(t, master, replArgs...)
	sentinels := testenv.StartSentinels(t, master, sentinelName, 3, time.Second, 10*time.Second)
	f := newFleet(t)
	failoverWorkers(t, f, "redis+sentinel://"+strings.Join(sentinels, ",")+"/"+sentinelName, master.Client())
	ids := failoverJobs(f, jobCount(300), 0, 0.3)

	testenv.WaitFor(t, 3*time.Minute, "a third of the jobs settled", func() bool { return len(f.settledCounts()) >= len(ids)/3 })
	settled := f.settledNow()
	master.Stop()
	took := testenv.WaitFor(t, time.Minute, "Sentinel promotes the replica", func() bool {
		return testenv.SentinelMaster(t, sentinels[0], sentinelName) == replica.Addr
	})
	t.Logf("master killed with %d of %d jobs settled; failover seen after %v", len(settled), len(ids), took)
	master.Restart()
	checkAfterFailover(t, f, ids, settled, 5*time.Minute)
}

// TestClusterFailover: three masters with a replica each; one master is SIGKILLed while jobs run
// and its replica takes its slots over.
func TestClusterFailover(t *testing.T) {
	cl := testenv.StartCluster(t, 3, 2*time.Second)
	for _, r := range cl.Masters {
		if err := r.Client().ConfigSet(t.Context(), "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	f := newFleet(t)
	failoverWorkers(t, f, cl.URL, cl.Client())
	ids := failoverJobs(f, jobCount(1000), 0, 0.2)

	testenv.WaitFor(t, 5*time.Minute, "a third of the jobs settled", func() bool { return len(f.settledCounts()) >= len(ids)/3 })
	settled := f.settledNow()
	cl.Masters[0].Stop()
	rc := cl.Replicas[0].Client()
	took := testenv.WaitFor(t, time.Minute, "the replica takes over its master's slots", func() bool {
		info, err := rc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	t.Logf("master killed with %d of %d jobs settled; failover seen after %v", len(settled), len(ids), took)
	cl.Masters[0].Restart()
	checkAfterFailover(t, f, ids, settled, 10*time.Minute)
}

// TestStaleReplicaPromoted: the replica replicates through a proxy whose link is cut while jobs
// run, so it misses the master's last writes (claims, reservations, settlements) while both ends
// still see the link up; then the master is SIGKILLed and Sentinel promotes the stale replica.
// Without WAIT, a job dispatched during the cut would find no record on the new master, be
// claimed as never run, and run twice.
func TestStaleReplicaPromoted(t *testing.T) {
	master := testenv.StartRedis(t, replArgs...)
	link := testenv.StartProxy(t, master.Addr)
	replica := testenv.StartReplicaVia(t, master, link.Addr, replArgs...)
	// Sentinel would point the replica at the master's own address after failover-timeout: the
	// run ends well before.
	sentinels := testenv.StartSentinels(t, master, sentinelName, 3, time.Second, 5*time.Minute)
	f := newFleet(t)
	failoverWorkers(t, f, "redis+sentinel://"+strings.Join(sentinels, ",")+"/"+sentinelName, master.Client())
	// Jobs outlast the lease's trust window (3 s less a fifth): one that a worker starts during
	// the cut is still running when the master dies, and its worker cannot settle it.
	ids := failoverJobs(f, jobCount(40), 2.5, 3.5)

	testenv.WaitFor(t, 3*time.Minute, "jobs settled", func() bool { return len(f.settledCounts()) >= 4 })
	link.Cut()
	settled := f.settledNow()
	before := len(f.dispatches())
	// The master now takes writes the replica never sees: dispatches (none once reservations
	// wait for the replica) or reservations that no replica acknowledged.
	testenv.WaitFor(t, time.Minute, "writes the replica misses", func() bool {
		if len(f.dispatches()) >= before+failoverSlots {
			return true
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, w := range f.procs {
			n += strings.Count(w.logText(), "not acknowledged by enough replicas")
		}
		return n >= failoverSlots
	})
	master.Stop()
	replicaSees := replica.Client()
	if info, err := replicaSees.Info(t.Context(), "replication").Result(); err != nil || !strings.Contains(info, "master_port:"+link.Port()) {
		t.Fatalf("the replica no longer follows the cut link: %v\n%s", err, info)
	}
	took := testenv.WaitFor(t, time.Minute, "Sentinel promotes the stale replica", func() bool {
		return testenv.SentinelMaster(t, sentinels[0], sentinelName) == replica.Addr
	})
	t.Logf("link cut with %d of %d jobs settled; master killed; failover seen after %v", len(settled), len(ids), took)
	master.Restart()
	checkAfterFailover(t, f, ids, settled, 5*time.Minute)
}
