package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestListJobs(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	if code, _ := f.do("GET", "/v1/jobs", apiKey, nil); code != http.StatusServiceUnavailable {
		t.Errorf("GET /v1/jobs without a worker = %d, want 503", code)
	}
	f.startWorker()
	var ids []string
	for range 3 {
		_, out := f.post("", `{"language":"python3","code":"import sys; sys.exit(2)"}`)
		id := out["job_id"].(string)
		f.settle(id)
		ids = append(ids, id)
	}
	// The index lists a job right after its settlement is stored.
	var got []string
	testenv.WaitFor(t, 30*time.Second, "the three jobs listed", func() bool {
		got = listFailed(t, f)
		return len(got) == 3
	})
	if want := []string{ids[2], ids[1], ids[0]}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("listed %v, want %v (newest first)", got, want)
	}
	for _, bad := range []string{"status=bogus", "since=yesterday", "limit=x", "limit=5000", "queue=a.b"} {
		if code, b := f.do("GET", "/v1/jobs?"+bad, apiKey, nil); code != http.StatusBadRequest {
			t.Errorf("GET /v1/jobs?%s = %d %s, want 400", bad, code, b)
		}
	}
	if code, _ := f.do("GET", "/v1/jobs", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/jobs without the key = %d, want 401", code)
	}
}

// listFailed follows the cursor of the failed jobs of the last hour, two a page.
func listFailed(t *testing.T, f *fleet) []string {
	var got []string
	cursor := ""
	for {
		code, b := f.do("GET", "/v1/jobs?status=failed&since=1h&limit=2&cursor="+cursor, apiKey, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/jobs = %d %s", code, b)
		}
		var l job.JobList
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, j := range l.Jobs {
			got = append(got, j.JobID)
		}
		if cursor = l.Cursor; cursor == "" {
			return got
		}
	}
}
