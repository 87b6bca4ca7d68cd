package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runfleet/runfleet/fleet/internal/metrics"
)

type policies map[string]bool

func (p policies) Has(t string) bool { return p[t] }

// TestSeriesFromTheStart: a fresh worker exports its build, its queues' counters at 0, histogram
// buckets past the longest job, and the default tenant by name.
func TestSeriesFromTheStart(t *testing.T) {
	m := metrics.New(metrics.Options{Slots: 2, Tenants: policies{"acme": true}, Queues: []string{"default", "gpu"}, Version: "v1.2.3"})
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`runfleet_build_info{goversion="go`,
		`version="v1.2.3"} 1`,
		`runfleet_jobs_claimed_total{queue="gpu"} 0`,
		`runfleet_dispatches_total{queue="default"} 0`,
		`runfleet_jobs_settled_total{queue="gpu",reason="",status="succeeded"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	m.Dispatched("default", "default", 0, 0)
	rec = httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ = io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `runfleet_queue_wait_seconds_bucket{queue="default",le="655.36"}`) {
		t.Errorf("queue wait buckets stop below the 5 min maximum timeout")
	}
	for tenant, want := range map[string]string{"default": "default", "acme": "acme", "made-up": metrics.OtherTenants} {
		if got := m.Tenant(tenant); got != want {
			t.Errorf("Tenant(%q) = %q, want %q", tenant, got, want)
		}
	}
}
