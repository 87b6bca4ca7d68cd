// Package metrics exposes a worker's Prometheus metrics and its health endpoints.
package metrics

import (
	"context"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runfleet/runfleet/job"
)

// Metrics are a worker's collectors. It implements runner.Observer.
type Metrics struct {
	Registry    *prometheus.Registry
	claimed     *prometheus.CounterVec
	redelivered *prometheus.CounterVec
	dispatched  *prometheus.CounterVec
	settled     *prometheus.CounterVec
	leasesLost  *prometheus.CounterVec
	running     prometheus.Gauge
	slots       prometheus.Gauge
	queueWait   *prometheus.HistogramVec
	start       *prometheus.HistogramVec
	runTime     *prometheus.HistogramVec
	total       *prometheus.HistogramVec
	waiting     *prometheus.GaugeVec
	takes       *prometheus.CounterVec
	takeWait    *prometheus.HistogramVec
	jobsBytes   prometheus.Gauge
	jobsMsgs    prometheus.Gauge
	jobsFull    prometheus.Gauge

	// Per tenant, labelled as [Metrics.Tenant] says.
	tenants       Tenants
	tenantQueued  *prometheus.GaugeVec
	tenantRunning *prometheus.GaugeVec
	tenantStarted *prometheus.CounterVec
	tenantSettled *prometheus.CounterVec
	tenantCPU     *prometheus.CounterVec
}

// Tenants says which tenants have a policy of their own: only those get a label value of their
// own, so that a publisher inventing tenant names cannot grow the metrics without bound.
type Tenants interface {
	Has(tenant string) bool
}

// OtherTenants is the label value shared by tenants without a policy of their own.
const OtherTenants = "other"

// Options describe the worker the metrics are of.
type Options struct {
	Slots   int      // the worker's concurrency
	Tenants Tenants  // the tenants labelled by name; nil: none but the default tenant
	Queues  []string // the queues served: their series exist, at 0, from the start
	Version string   // the build's version, in runfleet_build_info
}

// New registers the collectors.
func New(o Options) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// 5 ms to 655 s: past the longest timeout a job may have (--max-timeout, 5 min by default).
	buckets := prometheus.ExponentialBuckets(0.005, 2, 18)
	m := &Metrics{
		Registry:    reg,
		claimed:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_jobs_claimed_total", Help: "Deliveries whose lease this worker took."}, []string{"queue"}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_redeliveries_total", Help: "Deliveries seen that JetStream had delivered before."}, []string{"queue"}),
		dispatched:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_dispatches_total", Help: "Payloads sent into a sandbox."}, []string{"queue"}),
		settled:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_jobs_settled_total", Help: "Settlements stored by this worker."}, []string{"queue", "status", "reason"}),
		leasesLost:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_leases_lost_total", Help: "Jobs stopped because their lease ended."}, []string{"queue"}),
		running:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_jobs_running", Help: "Sandboxes running a job now."}),
		slots:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_slots_free", Help: "Sandbox slots free."}),
		queueWait:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_queue_wait_seconds", Help: "From publish to dispatch.", Buckets: buckets}, []string{"queue"}),
		start:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_sandbox_start_seconds", Help: "From asking for a sandbox to the payload going in: take, assign, associate.", Buckets: buckets}, []string{"queue"}),
		runTime:     prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_run_seconds", Help: "Program run time.", Buckets: buckets}, []string{"queue"}),
		total:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_publish_to_settlement_seconds", Help: "From publish to settlement.", Buckets: buckets}, []string{"queue"}),
		waiting:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runfleet_sandboxes_waiting", Help: "Sandboxes created ahead and waiting for a job."}, []string{"profile"}),
		takes:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_sandbox_takes_total", Help: "Sandboxes handed to jobs: warm (created ahead) or cold (created for the job)."}, []string{"profile", "source"}),
		takeWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runfleet_sandbox_wait_seconds", Help: "How long a job waited for its sandbox.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"profile"}),
		jobsBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_jobs_stream_bytes", Help: "Bytes the jobs stream holds: the kept requests."}),
		jobsMsgs:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_jobs_stream_messages", Help: "Requests the jobs stream holds."}),
		jobsFull: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runfleet_jobs_stream_fullness",
			Help: "Bytes the jobs stream holds over its bound (--jobs-max-bytes); at 1 new jobs are refused."}),
		tenants: o.Tenants,
		tenantQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runfleet_tenant_jobs_queued",
			Help: "The tenant's jobs stored and not yet delivered on this worker's queues, as of the last sweep."}, []string{"tenant"}),
		tenantRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runfleet_tenant_jobs_running", Help: "The tenant's jobs running on this worker."}, []string{"tenant"}),
		tenantStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_tenant_jobs_started_total", Help: "The tenant's jobs this worker dispatched."}, []string{"tenant"}),
		tenantSettled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_tenant_jobs_settled_total", Help: "The tenant's settlements this worker stored."}, []string{"tenant", "status"}),
		tenantCPU:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runfleet_tenant_cpu_seconds_total", Help: "Sandbox CPU time of the tenant's jobs settled by this worker."}, []string{"tenant"}),
	}
	reg.MustRegister(m.claimed, m.redelivered, m.dispatched, m.settled, m.leasesLost, m.running, m.slots,
		m.queueWait, m.start, m.runTime, m.total, m.waiting, m.takes, m.takeWait, m.jobsBytes, m.jobsMsgs, m.jobsFull,
		m.tenantQueued, m.tenantRunning, m.tenantStarted, m.tenantSettled, m.tenantCPU)
	m.slots.Set(float64(o.Slots))
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runfleet_build_info",
		Help: "1, labelled with the worker's version and Go version."}, []string{"version", "goversion"})
	reg.MustRegister(info)
	info.WithLabelValues(o.Version, runtime.Version()).Set(1)
	// A series that exists at 0 from the start: a rate over it, or an alert on its absence, needs
	// no first event.
	for _, q := range o.Queues {
		m.claimed.WithLabelValues(q)
		m.redelivered.WithLabelValues(q)
		m.dispatched.WithLabelValues(q)
		m.leasesLost.WithLabelValues(q)
		for _, st := range []job.Status{job.StatusSucceeded, job.StatusFailed, job.StatusTimedOut, job.StatusUnknown} {
			m.settled.WithLabelValues(q, string(st), "")
		}
	}
	return m
}

// JobsStream sets what the jobs stream holds and its bound (0 or less: none).
func (m *Metrics) JobsStream(bytes, msgs uint64, maxBytes int64) {
	m.jobsBytes.Set(float64(bytes))
	m.jobsMsgs.Set(float64(msgs))
	if maxBytes > 0 {
		m.jobsFull.Set(float64(bytes) / float64(maxBytes))
	}
}

// Claimed counts a claim.
func (m *Metrics) Claimed(queue string, redelivered bool) {
	m.claimed.WithLabelValues(queue).Inc()
	if redelivered {
		m.redelivered.WithLabelValues(queue).Inc()
	}
}

// Tenant is tenant's label value: its name when it is the default tenant or has a policy of its
// own, else OtherTenants.
func (m *Metrics) Tenant(tenant string) string {
	if tenant == job.DefaultTenant || m.tenants != nil && m.tenants.Has(tenant) {
		return tenant
	}
	return OtherTenants
}

// Dispatched counts a dispatch with its queue wait and sandbox start time.
func (m *Metrics) Dispatched(queue, tenant string, wait, start time.Duration) {
	m.dispatched.WithLabelValues(queue).Inc()
	m.tenantStarted.WithLabelValues(m.Tenant(tenant)).Inc()
	m.queueWait.WithLabelValues(queue).Observe(wait.Seconds())
	m.start.WithLabelValues(queue).Observe(start.Seconds())
}

// Settled counts a settlement.
func (m *Metrics) Settled(queue, tenant string, status job.Status, reason job.Reason, run, total, cpu time.Duration) {
	m.settled.WithLabelValues(queue, string(status), string(reason)).Inc()
	m.tenantSettled.WithLabelValues(m.Tenant(tenant), string(status)).Inc()
	if cpu > 0 {
		m.tenantCPU.WithLabelValues(m.Tenant(tenant)).Add(cpu.Seconds())
	}
	if status.Ran() {
		m.runTime.WithLabelValues(queue).Observe(run.Seconds())
	}
	if total > 0 {
		m.total.WithLabelValues(queue).Observe(total.Seconds())
	}
}

// Queued sets each tenant's jobs waiting, as a sweep of the tenant consumers counted them.
func (m *Metrics) Queued(byTenant map[string]uint64) {
	sums := map[string]uint64{}
	for t, n := range byTenant {
		sums[m.Tenant(t)] += n
	}
	m.tenantQueued.Reset()
	for label, n := range sums {
		m.tenantQueued.WithLabelValues(label).Set(float64(n))
	}
}

// Waiting sets how many sandboxes of profile wait.
func (m *Metrics) Waiting(profile string, n int) { m.waiting.WithLabelValues(profile).Set(float64(n)) }

// Took counts a sandbox handed to a job and how long the job waited for it.
func (m *Metrics) Took(profile string, warm bool, wait time.Duration) {
	source := "cold"
	if warm {
		source = "warm"
	}
	m.takes.WithLabelValues(profile, source).Inc()
	m.takeWait.WithLabelValues(profile).Observe(wait.Seconds())
}

// LeaseLost counts a job stopped for its lease.
func (m *Metrics) LeaseLost(queue string) { m.leasesLost.WithLabelValues(queue).Inc() }

// Running moves the running gauges and the free slots with them.
func (m *Metrics) Running(tenant string, delta int) {
	m.running.Add(float64(delta))
	m.tenantRunning.WithLabelValues(m.Tenant(tenant)).Add(float64(delta))
	m.slots.Sub(float64(delta))
}

// RemovalsPending exports n, the provider's sandbox removals left running after their jobs
// settled (the Docker provider's), as runfleet_sandbox_removals_pending.
func (m *Metrics) RemovalsPending(n func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "runfleet_sandbox_removals_pending",
		Help: "Sandboxes whose job settled and whose removal is not done yet."}, func() float64 { return float64(n()) }))
}

// DurabilityUnmet exports unmet, whether too few Redis replicas acknowledge the reservations
// now, as runfleet_durability_unmet.
func (m *Metrics) DurabilityUnmet(unmet func() bool) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "runfleet_durability_unmet",
		Help: "1 while too few Redis replicas acknowledge the reservations: the worker claims no job (unless --dispatch-without-replica)."},
		func() float64 {
			if unmet() {
				return 1
			}
			return 0
		}))
}

// Check is one readiness condition; nil means ready.
type Check func(ctx context.Context) error

// Handler serves /metrics, /healthz (the process lives) and /readyz (every check passes).
func (m *Metrics) Handler(ready map[string]Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, body := http.StatusOK, ""
		for name, check := range ready {
			if err := check(ctx); err != nil {
				status = http.StatusServiceUnavailable
				body += name + ": " + err.Error() + "\n"
			} else {
				body += name + ": ok\n"
			}
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
	return mux
}
