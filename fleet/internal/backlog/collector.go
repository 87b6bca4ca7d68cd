package backlog

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runfleet/runfleet/fleet/internal/queue"
)

var (
	queueWaiting = prometheus.NewDesc("runfleet_queue_waiting_jobs",
		"Jobs stored on the queue and not yet delivered to a worker, read from JetStream (served with no worker running).", []string{"queue"}, nil)
	queueRunning = prometheus.NewDesc("runfleet_queue_running_jobs",
		"Jobs of the queue delivered to a worker and not yet acked: claimed or running.", []string{"queue"}, nil)
	queueOldest = prometheus.NewDesc("runfleet_queue_oldest_wait_seconds",
		"How long the oldest job waiting on the queue has waited; 0 when none waits.", []string{"queue"}, nil)
	tenantWaiting = prometheus.NewDesc("runfleet_tenant_waiting_jobs",
		"runfleet_queue_waiting_jobs per tenant (\"other\": tenants without a policy of their own).", []string{"queue", "tenant"}, nil)
	tenantRunning = prometheus.NewDesc("runfleet_tenant_running_jobs",
		"runfleet_queue_running_jobs per tenant (\"other\" as above).", []string{"queue", "tenant"}, nil)
	tenantOldest = prometheus.NewDesc("runfleet_tenant_oldest_wait_seconds",
		"runfleet_queue_oldest_wait_seconds per tenant (\"other\" as above).", []string{"queue", "tenant"}, nil)
	backlogUp = prometheus.NewDesc("runfleet_backlog_up",
		"1 when the last read of the backlog from JetStream succeeded, 0 when it failed (and the backlog's series are absent).", nil, nil)
)

var _ prometheus.Collector = (*Reader)(nil)

// Describe sends the descriptions of the backlog's series.
func (r *Reader) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueWaiting, queueRunning, queueOldest, tenantWaiting, tenantRunning, tenantOldest, backlogUp} {
		ch <- d
	}
}

// Collect sends the backlog of a snapshot no older than the TTL. A failed read is reported as
// runfleet_backlog_up 0, never as a failed scrape: the process's other series stay.
func (r *Reader) Collect(ch chan<- prometheus.Metric) {
	snap, err := r.Snapshot(context.Background())
	if err != nil {
		ch <- prometheus.MustNewConstMetric(backlogUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(backlogUp, prometheus.GaugeValue, 1)
	for q, f := range snap.Queues {
		ch <- prometheus.MustNewConstMetric(queueWaiting, prometheus.GaugeValue, float64(f.Waiting), q)
		ch <- prometheus.MustNewConstMetric(queueRunning, prometheus.GaugeValue, float64(f.Running), q)
		ch <- prometheus.MustNewConstMetric(queueOldest, prometheus.GaugeValue, f.OldestWait.Seconds(), q)
	}
	labelled := map[queue.Pair]Figures{}
	for p, f := range snap.Tenants {
		l := queue.Pair{Queue: p.Queue, Tenant: r.o.TenantLabel(p.Tenant)}
		sum := labelled[l]
		sum.Waiting += f.Waiting
		sum.Running += f.Running
		sum.OldestWait = max(sum.OldestWait, f.OldestWait)
		labelled[l] = sum
	}
	for p, f := range labelled {
		ch <- prometheus.MustNewConstMetric(tenantWaiting, prometheus.GaugeValue, float64(f.Waiting), p.Queue, p.Tenant)
		ch <- prometheus.MustNewConstMetric(tenantRunning, prometheus.GaugeValue, float64(f.Running), p.Queue, p.Tenant)
		ch <- prometheus.MustNewConstMetric(tenantOldest, prometheus.GaugeValue, f.OldestWait.Seconds(), p.Queue, p.Tenant)
	}
}
