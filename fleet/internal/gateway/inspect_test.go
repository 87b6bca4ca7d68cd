package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/job"
)

func TestInspectRequest(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	f.startWorker()
	_, out := f.post("", `{"language":"python3","code":"import os; print(os.environ['WHO'])","env":{"WHO":"inspected"}}`)
	id := out["job_id"].(string)
	f.settle(id)
	code, b := f.do("GET", "/v1/jobs/"+id+"?request=true", apiKey, nil)
	var got struct {
		Queue, Tenant string
		Request       job.Request
		Settlement    job.Settlement
	}
	if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil {
		t.Fatalf("GET ?request=true = %d %s (%v)", code, b, err)
	}
	if got.Request.Env["WHO"] != "inspected" || got.Request.Language != "python3" || got.Settlement.JobID != id ||
		got.Queue != job.DefaultQueue || got.Tenant != job.DefaultTenant {
		t.Errorf("inspection = %+v, want the stored request and the settlement", got)
	}
	// The settlement's fields stand at the top too, as the plain GET returns them.
	var top job.Settlement
	if err := json.Unmarshal(b, &top); err != nil || top.JobID != id || top.Status != job.StatusSucceeded {
		t.Errorf("inspection's own fields = %+v (%v), want the settlement's: job_id %s, status succeeded", top, err, id)
	}
	if code, b := f.do("GET", "/v1/jobs/"+id, apiKey, nil); code != http.StatusOK || json.Unmarshal(b, &got.Settlement) != nil || got.Settlement.JobID != id {
		t.Errorf("GET without ?request = %d %s, want the settlement as before", code, b)
	}
	for path, want := range map[string]int{
		"/v1/jobs/" + id + "?request=maybe": http.StatusBadRequest,
		"/v1/jobs/no-such-job?request=true": http.StatusNotFound,
	} {
		if code, b := f.do("GET", path, apiKey, nil); code != want {
			t.Errorf("GET %s = %d %s, want %d", path, code, b, want)
		}
	}
	if code, _ := f.do("GET", "/v1/jobs/"+id+"?request=true", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET ?request=true without the key = %d, want 401", code)
	}
}
