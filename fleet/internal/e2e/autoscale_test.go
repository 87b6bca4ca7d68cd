package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/job"
)

// keda scales a fleet of worker processes as KEDA's metrics-api trigger and the HPA it drives
// would: desired = ceil(metric / target), bounded by [0, max]; up at once, down to the largest
// desired count of the last cooldown (the HPA's scale-down stabilization window; KEDA's
// cooldownPeriod before zero), a worker scaled in getting SIGTERM as a pod does.
type keda struct {
	target, max int
	cooldown    time.Duration
	history     []sample // the desired counts of the last cooldown
}

type sample struct {
	at      time.Time
	desired int
}

// replicas is how many workers to run now, given metric read at now.
func (k *keda) replicas(now time.Time, metric float64) int {
	desired := min(int((metric+float64(k.target)-1)/float64(k.target)), k.max)
	k.history = append(k.history, sample{now, desired})
	for len(k.history) > 0 && now.Sub(k.history[0].at) > k.cooldown {
		k.history = k.history[1:]
	}
	stable := 0
	for _, s := range k.history {
		stable = max(stable, s.desired)
	}
	return stable
}

// TestAutoscaleFromZero: with no worker running, a backlog stored on the queue is read from the
// gateway's GET /v1/backlog (the metrics-api JSON KEDA reads, at valueLocation "jobs"), and
// worker processes are started and stopped by KEDA's formula on it: 0 → 1 on the first job (a
// queue never served reads 1), → max once the first worker made the consumers that count the
// rest, down while the last, long jobs run (the worker scaled in is one running a job, the worst
// a scale-in can pick), and back to 0 after the cooldown; each scaled-in worker drains on SIGTERM.
// Every job runs once and none settles worker_shutdown. The backlog is 1,000 jobs (-short: 100;
// RUNFLEET_AUTOSCALE_JOBS sets another), the last 4 of them sleeping 8 s.
func TestAutoscaleFromZero(t *testing.T) {
	f := newFleet(t)
	n := 1000
	if testing.Short() {
		n = 100
	}
	if v, err := strconv.Atoi(os.Getenv("RUNFLEET_AUTOSCALE_JOBS")); err == nil && v > 4 {
		n = v
	}
	g, err := gateway.New(t.Context(), f.nats.Conn(), gateway.Options{APIKey: "k", DisableUI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	signal := httptest.NewServer(g.Backlog()) // as --metrics-listen serves it
	defer signal.Close()
	read := func() (float64, error) {
		resp, err := http.Get(signal.URL + "/v1/backlog?queue=" + job.DefaultQueue)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET /v1/backlog = %d: %v", resp.StatusCode, err)
		}
		v, ok := body["jobs"].(float64) // the chart's valueLocation
		if !ok {
			return 0, fmt.Errorf("GET /v1/backlog: no number at jobs in %v", body)
		}
		return v, nil
	}

	start := time.Now()
	ids := make([]string, n)
	for i := range ids {
		code := fmt.Sprintf("print(%d)", i)
		if i >= n-4 {
			code = "import time; time.sleep(8)"
		}
		ids[i] = f.submit(job.Request{Language: "python3", Code: code})
	}
	t.Logf("%d jobs stored in %v with no worker", n, time.Since(start).Round(time.Millisecond))

	k := &keda{target: 2, max: 3, cooldown: 3 * time.Second} // target: each worker's --concurrency
	var running, draining []*worker
	termed := map[*worker]time.Time{}
	var peak, started int
	// victim is the worker a scale-in stops: one running a job when there is one.
	victim := func() int {
		settled := f.settledCounts()
		busy := map[string]bool{}
		for _, d := range f.dispatchLog() {
			if settled[d.JobID] == 0 {
				busy[d.Worker] = true
			}
		}
		for i := len(running) - 1; i >= 0; i-- {
			if busy[running[i].id] {
				return i
			}
		}
		return len(running) - 1
	}
	var drainedAt time.Time
	deadline := time.Now().Add(10 * time.Minute)
	poll := time.NewTicker(200 * time.Millisecond) // KEDA's polling interval, scaled down
	defer poll.Stop()
	for ; ; <-poll.C {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 minutes: %d workers running, %d draining, %d of %d jobs settled", len(running), len(draining), len(f.settledCounts()), n)
		}
		metric, err := read()
		if err != nil {
			t.Fatal(err)
		}
		want := k.replicas(time.Now(), metric)
		for len(running) < want {
			started++
			running = append(running, f.start(fmt.Sprintf("scaled-%d", started), "--grace", "2m"))
		}
		for len(running) > want {
			i := victim()
			w := running[i]
			running = append(running[:i], running[i+1:]...)
			w.signal(syscall.SIGTERM)
			termed[w] = time.Now()
			draining = append(draining, w)
		}
		peak = max(peak, len(running))
		if drainedAt.IsZero() && len(f.settledCounts()) == n {
			drainedAt = time.Now()
		}
		if !drainedAt.IsZero() && len(running) == 0 {
			break
		}
	}
	zeroAt := time.Now()
	var drains []string
	busyAtTerm := 0
	for _, w := range draining {
		w.exited(t, 2*time.Minute)
		if code := w.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("worker %s exit code %d, want 0", w.id, code)
		}
		if runningAtTerm(w) > 0 {
			busyAtTerm++
		}
		drains = append(drains, fmt.Sprintf("%s %v", w.id, w.exitedAt.Sub(termed[w]).Round(time.Millisecond)))
	}
	fmt.Printf("autoscale: %d jobs, 0 → %d workers (%d started), every job settled %v after the first was stored, 0 workers %v later (cooldown %v); SIGTERM to exit: %s\n",
		n, peak, started, drainedAt.Sub(start).Round(time.Millisecond), zeroAt.Sub(drainedAt).Round(time.Millisecond), k.cooldown, strings.Join(drains, ", "))
	if peak < k.max {
		t.Errorf("peak %d workers, want %d: the backlog of %d jobs should have asked for them", peak, k.max, n)
	}
	if busyAtTerm == 0 {
		t.Errorf("no worker was scaled in while running a job: the drain was not exercised")
	}

	settled := f.settledCounts()
	dispatched := f.dispatches()
	results, err := f.js.Stream(t.Context(), f.client.Subjects().ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]int{}
	for _, id := range ids {
		if settled[id] != 1 || dispatched[id] != 1 {
			t.Errorf("job %s: %d settlements, %d dispatches, want 1 and 1", id, settled[id], dispatched[id])
			continue
		}
		m, err := results.GetLastMsgForSubject(t.Context(), f.client.Subjects().Settled(job.DefaultTenant, id))
		if err != nil {
			t.Fatal(err)
		}
		var st job.Settlement
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatal(err)
		}
		statuses[string(st.Status)+"/"+string(st.Reason)]++
	}
	if statuses[string(job.StatusSucceeded)+"/"] != n {
		t.Errorf("settlements %v, want %d succeeded (none worker_shutdown)", statuses, n)
	}
	for _, w := range draining {
		if strings.Contains(w.logText(), string(job.ReasonWorkerShutdown)) {
			t.Errorf("worker %s logged %s", w.id, job.ReasonWorkerShutdown)
		}
	}
}

// runningAtTerm is how many jobs worker w said it was running when SIGTERM stopped its claims.
func runningAtTerm(w *worker) int {
	for line := range strings.SplitSeq(w.logText(), "\n") {
		var l struct {
			Msg     string
			Running int
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "stop claiming, let running jobs finish" {
			return l.Running
		}
	}
	return 0
}
