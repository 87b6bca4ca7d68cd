package gateway

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runfleet/runfleet/fleet/internal/tracing"
)

// Metrics are a gateway's collectors.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	waiting  prometheus.Gauge
	nwaiting atomic.Int64 // the gauge's value, readable
	jobs     *prometheus.CounterVec
	// Per tenant, labelled "other" for a tenant without a policy of its own (bounded cardinality).
	tenantJobs    *prometheus.CounterVec
	tenantRefused *prometheus.CounterVec
}

// NewMetrics registers the collectors in a registry of their own.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_gateway_requests_total",
			Help: "HTTP requests answered, by route pattern and status code."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_gateway_request_seconds",
			Help: "From request to the end of its answer, by route pattern.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 19)},
			[]string{"route"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_gateway_waiting",
			Help: "Requests holding a watch on a job: waiting for its settlement or following its events."}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_gateway_jobs_submitted_total",
			Help: "Jobs stored through the gateway, by API (native, dify, piston or judge0)."}, []string{"api"}),
		tenantJobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_gateway_tenant_jobs_submitted_total",
			Help: "Jobs stored through the gateway, by tenant (\"other\": tenants without a policy of their own)."}, []string{"tenant"}),
		tenantRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_gateway_tenant_jobs_refused_total",
			Help: "Submits refused before anything was stored, by tenant (\"other\" as above) and reason."}, []string{"tenant", "reason"}),
	}
	reg.MustRegister(m.requests, m.duration, m.waiting, m.jobs, m.tenantJobs, m.tenantRefused)
	return m
}

// Handler serves the registry in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Waiting is the number of requests holding a watch now.
func (m *Metrics) Waiting() int64 { return m.nwaiting.Load() }

// watching counts one more waiting request; the caller calls the function it returns when done.
func (m *Metrics) watching() func() {
	m.nwaiting.Add(1)
	m.waiting.Inc()
	return func() {
		m.waiting.Dec()
		m.nwaiting.Add(-1)
	}
}

// instrument counts and times every request, logs it, and bounds each of its writes by
// writeTimeout.
func (m *Metrics) instrument(log *slog.Logger, writeTimeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := newStatusWriter(w, writeTimeout)
		info := &requestInfo{}
		r = r.WithContext(context.WithValue(tracing.FromHTTP(r.Context(), r.Header), requestInfoKey{}, info))
		next.ServeHTTP(sw, r)
		route := r.Pattern // set by the mux on this request
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		took := time.Since(start)
		m.duration.WithLabelValues(route).Observe(took.Seconds())
		attrs := []any{"method", r.Method, "route", route, "code", sw.code, "ms", took.Milliseconds(),
			"job_id", cmp.Or(info.jobID, r.PathValue("id")), "remote", r.RemoteAddr}
		if trace := cmp.Or(info.traceID, tracing.TraceID(r.Context())); trace != "" {
			attrs = append(attrs, "trace_id", trace)
		}
		log.Info("request", attrs...)
	})
}

// routeOf names r by the pattern of api that would have served it, so that a request refused
// before routing (401) is counted and logged under its own route, not under the web view's "/".
func routeOf(r *http.Request, api http.Handler) {
	if mux, ok := api.(*http.ServeMux); ok {
		_, r.Pattern = mux.Handler(r)
	}
}

// requestInfo is what a handler tells the request log (the job it stored or followed), and who
// the request acts for, set by authenticate in place so that the request the mux fills with its
// pattern stays the one instrument logs.
type requestInfo struct {
	jobID   string
	traceID string // of the job's send span, when the request stored one
	caller  caller
}

type requestInfoKey struct{}

// setJobID names the job of request r in its log line.
func setJobID(r *http.Request, id string) {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		info.jobID = id
	}
}

// submitted counts a job stored through api for tenant.
func (g *Gateway) submitted(api, tenant string) {
	g.metrics.jobs.WithLabelValues(api).Inc()
	g.metrics.tenantJobs.WithLabelValues(g.tenantLabel(tenant)).Inc()
}

// refused counts a submit of tenant refused before anything was stored, by its native reason.
func (g *Gateway) refused(tenant, reason string) {
	g.metrics.tenantRefused.WithLabelValues(g.tenantLabel(tenant), reason).Inc()
}
