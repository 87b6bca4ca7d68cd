package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestKillAtEachPhase kills a worker with SIGKILL at each phase of a job's life; another worker
// then settles it. Whether the code may have run (its dispatch marker, docs/protocol.md "The
// dispatch gate") decides the status; it never runs twice.
func TestKillAtEachPhase(t *testing.T) {
	cases := []struct {
		phase      string
		status     job.Status
		dispatches int
	}{
		{"claimed", job.StatusSucceeded, 1},    // nothing reserved: provably not run, runs now
		{"reserved", job.StatusSucceeded, 1},   // reserved, no dispatch marker: provably not run, runs now
		{"associated", job.StatusSucceeded, 1}, // sandbox associated, no marker yet: likewise
		{"gate", job.StatusUnknown, 0},         // marker stored, payload not yet sent: may have run, never again
		{"running", job.StatusUnknown, 1},      // the code ran; its outcome died with the worker
		{"settled", job.StatusSucceeded, 1},    // settlement stored, ack lost: redelivery is acked
	}
	for _, c := range cases {
		t.Run(c.phase, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			a := f.start("victim", "--crash-at", c.phase)
			id := f.submit(job.Request{Language: "python3", Code: "import time; time.sleep(0.6); print('ran')"})
			a.exited(t, 30*time.Second)
			f.start("rescuer")
			st := f.settlement(id, 30*time.Second)
			f.queueDrained(30 * time.Second) // acked: no redelivery can store a second settlement
			if st.Status != c.status {
				t.Errorf("status = %s (%s), want %s", st.Status, st.Reason, c.status)
			}
			if n := f.settledCounts()[id]; n != 1 {
				t.Errorf("settlements stored = %d, want 1", n)
			}
			if n := f.dispatches()[id]; n != c.dispatches {
				t.Errorf("dispatches = %d, want %d", n, c.dispatches)
			}
		})
	}
}

// TestKillAfterCollect kills a worker once it stored a job's artifacts and before it settled: the
// worker that takes the job over settles it unknown, lists no artifact, and removes the dead
// attempt's objects (G4: what a settlement lists is what the bucket holds).
func TestKillAfterCollect(t *testing.T) {
	f := newFleet(t)
	a := f.start("victim", "--crash-at", "collected")
	id := f.submit(job.Request{Language: "python3", Outputs: []string{"out/*"},
		Code: "import os\nos.makedirs('out')\nfor n in 'abc': open('out/' + n, 'w').write(n * 1000)"})
	a.exited(t, 30*time.Second)
	if got := f.artifactObjects(id); len(got) != 4 { // three files and the attempt's manifest
		t.Fatalf("objects of the dead attempt = %q, want 3 files and a manifest", got)
	}
	f.start("rescuer")
	st := f.settlement(id, 30*time.Second)
	if st.Status != job.StatusUnknown || st.Artifacts != nil {
		t.Errorf("settled %s with artifacts %v, want unknown with none", st.Status, st.Artifacts)
	}
	f.queueDrained(30 * time.Second)
	if got := f.artifactObjects(id); len(got) != 0 {
		t.Errorf("bucket holds %q after the takeover settled, want nothing of the job", got)
	}
}

// TestStalledWorkerIsFenced stops a worker mid-job for longer than its lease and AckWait, lets
// another worker take the redelivery, and resumes it: nothing it writes after is stored.
func TestStalledWorkerIsFenced(t *testing.T) {
	f := newFleet(t)
	a := f.start("stalled")
	id := f.submit(job.Request{Language: "python3", Code: "import time\nfor i in range(60):\n    print(i, flush=True); time.sleep(0.1)"})
	testenv.WaitFor(t, 30*time.Second, "a page of the first attempt stored", func() bool { return len(f.results(id)) > 0 })
	a.signal(syscall.SIGSTOP)
	f.start("taker")
	st := f.settlement(id, 30*time.Second)
	if st.Status != job.StatusUnknown || st.Worker != "taker" {
		t.Errorf("settled %s by %s, want unknown by taker", st.Status, st.Worker)
	}
	a.signal(syscall.SIGCONT)
	// The resumed worker finds its trust window closed, kills its sandbox and stores nothing.
	testenv.WaitFor(t, 30*time.Second, "the resumed worker giving the job up", func() bool {
		return strings.Contains(a.logText(), "storing nothing more")
	})
	var settledSeq uint64
	var pages, stdout int64
	for _, m := range f.results(id) {
		switch {
		case m.Subject == "runfleet.results.default."+id+".settled":
			settledSeq = m.Sequence
		case settledSeq != 0:
			t.Errorf("%s (attempt %s) stored at seq %d after the settlement at %d", m.Subject, m.Header.Get(job.HeaderAttempt), m.Sequence, settledSeq)
		default:
			pages++
			stdout += int64(len(m.Data))
		}
	}
	if settledSeq == 0 {
		t.Error("no settlement stored")
	}
	if st.Pages != pages || st.StdoutBytes != stdout || pages == 0 {
		t.Errorf("unknown settlement counts %d pages, %d bytes; the first attempt stored %d pages, %d bytes", st.Pages, st.StdoutBytes, pages, stdout)
	}
	if n := f.settledCounts()[id]; n != 1 {
		t.Errorf("settlements = %d, want 1", n)
	}
	if n := f.dispatches()[id]; n != 1 {
		t.Errorf("dispatches = %d, want 1", n)
	}
}

// runJobs submits n jobs of random length and returns their ids.
func runJobs(f *fleet, n int, maxSleep float64) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3",
			Code: fmt.Sprintf("import time; time.sleep(%.2f); print('job %d')", rand.Float64()*maxSleep, i)})
	}
	return ids
}

// tally waits for every job and reports lost, duplicated dispatches, duplicate settlements and
// the count per status.
func tally(t *testing.T, f *fleet, ids []string, within time.Duration) map[job.Status]int {
	t.Helper()
	statuses := map[job.Status]int{}
	var mu sync.Mutex
	lost := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st, err := func() (job.Settlement, error) {
				c, cancel := contextWithTimeout(t, within)
				defer cancel()
				return f.client.Watch(c, id, nil)
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lost++
				return
			}
			statuses[st.Status]++
		})
	}
	wg.Wait()
	f.queueDrained(within) // every delivery acked: nothing more can be stored
	dupDispatch, dupSettle := 0, 0
	disp, settled := f.dispatches(), f.settledCounts()
	for _, id := range ids {
		if disp[id] > 1 {
			dupDispatch++
		}
		if settled[id] > 1 {
			dupSettle++
		}
	}
	t.Logf("jobs %d: lost %d, duplicated dispatches %d, duplicate settlements %d; statuses %v",
		len(ids), lost, dupDispatch, dupSettle, statuses)
	if lost != 0 || dupDispatch != 0 || dupSettle != 0 {
		t.Errorf("lost %d, duplicated dispatches %d, duplicate settlements %d; want all 0", lost, dupDispatch, dupSettle)
	}
	return statuses
}

func TestRedisRestartedEmpty(t *testing.T) {
	f := newFleet(t)
	f.start("w1")
	f.start("w2")
	ids := runJobs(f, 30, 0.5)
	testenv.WaitFor(t, 30*time.Second, "jobs under way", func() bool { return len(f.dispatches()) >= 5 })
	f.redis.Restart()
	tally(t, f, ids, 90*time.Second)
}

func TestNATSRestarted(t *testing.T) {
	f := newFleet(t)
	f.start("w1")
	ids := runJobs(f, 20, 0.4)
	testenv.WaitFor(t, 30*time.Second, "jobs under way", func() bool { return len(f.dispatches()) >= 5 })
	f.nats.Restart()
	tally(t, f, ids, 90*time.Second)
}

// TestChaos runs 3 workers and kills one with SIGKILL every few seconds, restarting it. The
// short form runs in CI; `make chaos` runs 500 jobs.
func TestChaos(t *testing.T) {
	n := 60
	if s := os.Getenv("RUNFLEET_CHAOS_JOBS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	f := newFleet(t)
	workers := []*worker{f.start("chaos-0"), f.start("chaos-1"), f.start("chaos-2")}
	ids := runJobs(f, n, 1.0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	kills := 0
	wg.Go(func() {
		for gen := 1; ; gen++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
			i := rand.IntN(len(workers))
			workers[i].kill()
			kills++
			workers[i] = f.start(fmt.Sprintf("chaos-%d-%d", i, gen))
		}
	})
	statuses := tally(t, f, ids, time.Duration(n)*time.Second+2*time.Minute)
	close(stop)
	wg.Wait()
	t.Logf("chaos: %d workers killed with SIGKILL and restarted", kills)
	if statuses[job.StatusSucceeded] == 0 {
		t.Errorf("no job succeeded: %v", statuses)
	}
}
