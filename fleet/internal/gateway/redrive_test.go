package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestRedriveRoutes: one job redriven (and again, the same new job), then a bulk run paced slowly
// enough to be stopped half way by DELETE.
func TestRedriveRoutes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	const n = 12
	var ids []string
	for range n {
		_, out := f.post("", `{"language":"python3","code":"import sys; sys.exit(9)"}`)
		ids = append(ids, out["job_id"].(string))
	}
	for _, id := range ids {
		f.settle(id)
	}
	until := time.Now().UTC().Format(time.RFC3339Nano)
	decode := func(b []byte, v any) {
		t.Helper()
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	code, b := f.do("POST", "/v1/jobs/"+ids[0]+"/redrive", apiKey, nil)
	var r job.Redriven
	decode(b, &r)
	if code != http.StatusCreated || r.RedriveOf != ids[0] || r.JobID != job.RedriveID(ids[0]) {
		t.Fatalf("POST redrive = %d %s", code, b)
	}
	if st := f.settle(r.JobID); st.RedriveOf != ids[0] || st.Status != job.StatusFailed {
		t.Errorf("redriven job settled %+v, want failed with redrive_of %s", st, ids[0])
	}
	if code, b := f.do("POST", "/v1/jobs/"+ids[0]+"/redrive", apiKey, nil); code != http.StatusOK {
		t.Errorf("repeated POST redrive = %d %s, want 200 (the same job)", code, b)
	}
	body := `{"status":"failed","since":"` + since + `","until":"` + until + `","rate_per_s":2`
	var run job.RedriveRun
	// The index lists a job right after its settlement is stored.
	testenv.WaitFor(t, 30*time.Second, "a dry run counting every job", func() bool {
		code, b = f.do("POST", "/v1/redrives", apiKey, []byte(body+`,"dry_run":true}`))
		decode(b, &run)
		return code == http.StatusOK && run.Total == n && run.ID == ""
	})
	code, b = f.do("POST", "/v1/redrives", apiKey, []byte(body+`}`))
	decode(b, &run)
	if code != http.StatusAccepted || run.ID == "" || run.State != job.RunRunning {
		t.Fatalf("POST /v1/redrives = %d %s", code, b)
	}
	testenv.WaitFor(t, 30*time.Second, "the run's first jobs", func() bool {
		_, b := f.do("GET", "/v1/redrives/"+run.ID, apiKey, nil)
		decode(b, &run)
		return run.Redriven >= 2
	})
	if code, b := f.do("DELETE", "/v1/redrives/"+run.ID, apiKey, nil); code != http.StatusOK {
		t.Fatalf("DELETE = %d %s", code, b)
	}
	testenv.WaitFor(t, 30*time.Second, "the run stopped", func() bool {
		_, b := f.do("GET", "/v1/redrives/"+run.ID, apiKey, nil)
		decode(b, &run)
		return run.State == job.RunStopped
	})
	if run.Redriven >= n || run.Redriven+run.Skipped+run.Failed >= n {
		t.Errorf("stopped run = %+v, want it stopped before its %d jobs", run, n)
	}
	for path, want := range map[string]int{
		"/v1/redrives/no-such-run":       http.StatusNotFound,
		"/v1/jobs/no-such-job/redrive":   http.StatusNotFound,
		"/v1/jobs/" + r.JobID + "/bogus": http.StatusNotFound,
	} {
		method := "GET"
		if path == "/v1/jobs/no-such-job/redrive" {
			method = "POST"
		}
		if code, b := f.do(method, path, apiKey, nil); code != want {
			t.Errorf("%s %s = %d %s, want %d", method, path, code, b, want)
		}
	}
	// The refusals that name their reason (docs/protocol.md): a job that succeeded, one still running.
	_, out := f.post("", `{"language":"python3","code":"print('done')"}`)
	done := out["job_id"].(string)
	f.settle(done)
	_, out = f.post("", `{"language":"python3","code":"import time; time.sleep(60)"}`)
	running := out["job_id"].(string)
	for id, reason := range map[string]string{done: protocol.ReasonNotRedrivable, running: protocol.ReasonNotSettled} {
		code, b := f.do("POST", "/v1/jobs/"+id+"/redrive", apiKey, nil)
		var e struct{ Reason string }
		if code != http.StatusConflict || json.Unmarshal(b, &e) != nil || e.Reason != reason {
			t.Errorf("POST redrive of %s = %d %s, want 409 %s", id, code, b, reason)
		}
	}
	if code, b := f.do("DELETE", "/v1/jobs/"+running, apiKey, nil); code != http.StatusAccepted {
		t.Errorf("DELETE the running job = %d %s, want 202", code, b)
	}
}
