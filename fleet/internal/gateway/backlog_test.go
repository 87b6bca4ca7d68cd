package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestBacklogServed: with no worker at all, the jobs stored through the gateway are its backlog
// on GET /v1/backlog (the operator's key only) and on /metrics, and a refused request is counted
// under its own route.
func TestBacklogServed(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	for range 3 {
		f.submitAs(apiKey, "", `{"language":"python3","code":"pass"}`)
	}
	keyA := f.addKey("alpha", tenant.Policy{})
	if code, _ := f.do("GET", "/v1/backlog", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/backlog without a key = %d, want 401", code)
	}
	if code, _ := f.do("GET", "/v1/backlog", keyA, nil); code != http.StatusForbidden {
		t.Errorf("GET /v1/backlog with a tenant's key = %d, want 403", code)
	}
	var got struct {
		Queue   string
		Waiting uint64
		Jobs    uint64
	}
	code, b := f.do("GET", "/v1/backlog?queue=default", apiKey, nil)
	if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil || got.Queue != "default" || got.Waiting < 1 || got.Jobs != got.Waiting {
		t.Errorf("GET /v1/backlog with no worker = %d %s, want 200 with jobs waiting", code, b)
	}
	testenv.WaitFor(t, 10*time.Second, "the backlog on /metrics", func() bool {
		_, b := f.do("GET", "/metrics", apiKey, nil)
		return bytes.Contains(b, []byte(`runfleet_queue_waiting_jobs{queue="default"}`)) &&
			bytes.Contains(b, []byte(`runfleet_gateway_requests_total{code="401",route="GET /v1/backlog"} 1`))
	})
}
