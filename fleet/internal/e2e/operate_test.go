package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestGracefulShutdown sends SIGTERM with jobs in flight: the worker exits 0 once the grace period
// is over, the jobs settle failed/worker_shutdown, and no sandbox or lease is left behind.
func TestGracefulShutdown(t *testing.T) {
	f := newFleet(t)
	w := f.start("draining", "--grace", "1s")
	ids := []string{
		f.submit(job.Request{Language: "python3", Code: "import time; print('long', flush=True); time.sleep(60)"}),
		f.submit(job.Request{Language: "nodejs", Code: "console.log('long'); setTimeout(() => {}, 60000)"}),
	}
	testenv.WaitFor(t, 30*time.Second, "both jobs started", func() bool {
		return len(f.results(ids[0])) > 0 && len(f.results(ids[1])) > 0
	})
	w.signal(syscall.SIGTERM)
	w.exited(t, 15*time.Second)
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("worker exit code = %d, want 0", code)
	}
	for _, id := range ids {
		st := f.settlement(id, 5*time.Second)
		if st.Status != job.StatusFailed || st.Reason != job.ReasonWorkerShutdown || !st.SandboxDestroyed {
			t.Errorf("job %s settled %s/%s destroyed=%v, want failed/worker_shutdown, destroyed", id, st.Status, st.Reason, st.SandboxDestroyed)
		}
	}
	if left := leftoverCgroups(w.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("sandbox cgroups left behind: %v", left)
	}
	if keys, err := f.redis.Client().Keys(context.Background(), "runfleet:*:lease:*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("leases left behind: %v %v", keys, err)
	}
}

// TestRestartedWorkerPicksUp stops a worker and starts another: jobs stored meanwhile run.
func TestRestartedWorkerPicksUp(t *testing.T) {
	f := newFleet(t)
	w := f.start("first")
	if st := f.settlement(f.submit(job.Request{Language: "python3", Code: "print(1)"}), 30*time.Second); st.Status != job.StatusSucceeded {
		t.Fatalf("first job %s", st.Status)
	}
	w.signal(syscall.SIGTERM)
	w.exited(t, 15*time.Second)
	id := f.submit(job.Request{Language: "python3", Code: "print(2)"})
	f.start("second")
	if st := f.settlement(id, 30*time.Second); st.Status != job.StatusSucceeded || st.Worker != "second" {
		t.Errorf("job stored while no worker ran settled %s by %s", st.Status, st.Worker)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, url)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d %q, want %d", url, code, body, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsAndReadiness scrapes /metrics as jobs run, and watches /readyz flip when Redis is
// gone and come back with it.
func TestMetricsAndReadiness(t *testing.T) {
	f := newFleet(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	f.start("observed", "--listen", addr)
	base := "http://" + addr
	waitStatus(t, base+"/readyz", 200)
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	for range 3 {
		f.settlement(f.submit(job.Request{Language: "python3", Code: "print(1)"}), 30*time.Second)
	}
	f.settlement(f.submit(job.Request{Language: "python3", Code: "import sys; sys.exit(2)"}), 30*time.Second)
	// A settlement is stored before the worker counts it: scrape until the counts arrive.
	var families map[string]*dto.MetricFamily
	settled := map[string]float64{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, body := get(t, base+"/metrics")
		parser := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		if families, err = parser.TextToMetricFamilies(strings.NewReader(body)); err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		settled = map[string]float64{}
		for _, m := range families["runfleet_jobs_settled_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "status":
					settled[l.GetValue()] += m.GetCounter().GetValue()
				case "job_id":
					t.Fatalf("a metric is labelled with the job id")
				}
			}
		}
		if settled["succeeded"] == 3 && settled["failed"] == 1 {
			break
		}
	}
	if settled["succeeded"] != 3 || settled["failed"] != 1 {
		t.Errorf("runfleet_jobs_settled_total by status = %v, want succeeded 3, failed 1", settled)
	}
	for _, name := range []string{"runfleet_dispatches_total", "runfleet_jobs_claimed_total", "runfleet_queue_wait_seconds",
		"runfleet_publish_to_settlement_seconds", "runfleet_slots_free", "runfleet_jobs_running"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	f.redis.Stop()
	waitStatus(t, base+"/readyz", 503)
	f.redis.Restart()
	waitStatus(t, base+"/readyz", 200)
	f.nats.Stop()
	waitStatus(t, base+"/readyz", 503)
	f.nats.Restart()
	waitStatus(t, base+"/readyz", 200)
	if st := f.settlement(f.submit(job.Request{Language: "python3", Code: "print('after')"}), 30*time.Second); st.Status != job.StatusSucceeded {
		t.Errorf("job after Redis came back settled %s", st.Status)
	}
}

// TestSecondSignalEndsAtOnce: with a long grace period, a second SIGTERM kills the running job
// now, and it still settles.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	f := newFleet(t)
	w := f.start("impatient", "--grace", "60s")
	id := f.submit(job.Request{Language: "python3", Code: "import time; print('up', flush=True); time.sleep(60)"})
	testenv.WaitFor(t, 30*time.Second, "job started", func() bool { return len(f.results(id)) > 0 })
	w.signal(syscall.SIGTERM)
	testenv.WaitFor(t, 10*time.Second, "first signal heard", func() bool { return strings.Contains(w.logText(), "stop claiming") })
	w.signal(syscall.SIGTERM)
	w.exited(t, 10*time.Second)
	if st := f.settlement(id, 5*time.Second); st.Status != job.StatusFailed || st.Reason != job.ReasonWorkerShutdown {
		t.Errorf("settled %s/%s, want failed/worker_shutdown", st.Status, st.Reason)
	}
}
