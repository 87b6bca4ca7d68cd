package gateway

import (
	"net/http"

	"github.com/runfleet/runfleet/fleet/internal/backlog"
)

// newBacklog reads the queues' backlog for /metrics and GET /v1/backlog: the default queue, the
// declared ones and every one with a consumer; tenants labelled as the gateway's other series are.
func (g *Gateway) newBacklog() {
	g.backlog = backlog.New(g.js, g.subjects, backlog.Options{Queues: []string{g.o.Queue},
		Declared: g.tenants.DeclaredQueues, TenantLabel: g.tenantLabel})
	g.metrics.Registry.MustRegister(g.backlog)
}

// Backlog serves GET /v1/backlog (docs/protocol.md "HTTP gateway"), without the key: the caller
// mounts it where only the operator's scrapers and autoscaler reach (--metrics-listen).
func (g *Gateway) Backlog() http.Handler { return g.backlog.Handler() }
