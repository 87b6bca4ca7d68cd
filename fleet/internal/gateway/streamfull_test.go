package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/protocol"
)

// TestJobsStreamFullAnswer: a tenant that fills the jobs stream's bytes (no worker takes its
// jobs) gets, on the next submit, the documented 503 jobs_stream_full with Retry-After, not
// "unavailable" nor a 504 "may have been stored", and nothing more is stored.
func TestJobsStreamFullAnswer(t *testing.T) {
	f := newFleet(t, gateway.Options{Streams: protocol.StreamOptions{JobsMaxBytes: 16 << 10}})
	code := strings.Repeat("#", 1000)
	for i := range 100 {
		body := fmt.Sprintf(`{"id":"fill-%d","language":"python3","code":%q}`, i, code)
		status, b := f.do("POST", "/v1/jobs", apiKey, []byte(body))
		if status == http.StatusAccepted {
			continue
		}
		var e struct{ Reason string }
		if status != http.StatusServiceUnavailable || json.Unmarshal(b, &e) != nil || e.Reason != "jobs_stream_full" {
			t.Fatalf("submit %d into a full stream = %d %s, want 503 jobs_stream_full", i, status, b)
		}
		stored := f.storedJobs()
		status, b = f.do("POST", "/v1/sandbox/run", apiKey, []byte(`{"language":"python3","code":"`+code+`","preload":"","enable_network":false}`), "Content-Type", "application/json")
		if status != http.StatusServiceUnavailable || !strings.Contains(string(b), "jobs_stream_full") {
			t.Errorf("dify run into a full stream = %d %s, want 503 jobs_stream_full", status, b)
		}
		if n := f.storedJobs(); n != stored || uint64(i) != stored {
			t.Errorf("jobs stored = %d after the refusals, want %d (those accepted)", n, i)
		}
		return
	}
	t.Fatal("100 jobs of 1 KB fit into a jobs stream of 16 KiB")
}
