package backlog

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/job"
)

// Answer is the body of GET /v1/backlog: one queue's figures (or one tenant's on it), in the
// shape KEDA's metrics-api scaler reads (valueLocation "jobs").
type Answer struct {
	Queue  string `json:"queue"`
	Tenant string `json:"tenant,omitempty"`
	Figures
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
}

// Handler serves GET /v1/backlog?queue=&tenant=: the figures of queue (default: the first of
// Options.Queues), or of one tenant on it. 400 invalid_query for a bad name, 404 unknown_queue for
// a queue the snapshot does not report, 503 unavailable when JetStream cannot be read.
func (r *Reader) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		v := req.URL.Query()
		var def string
		if len(r.o.Queues) > 0 {
			def = r.o.Queues[0]
		}
		a := Answer{Queue: cmp.Or(v.Get("queue"), def), Tenant: v.Get("tenant")}
		if !job.ValidQueue(a.Queue) || (a.Tenant != "" && !job.ValidTenant(a.Tenant)) {
			write(w, http.StatusBadRequest, map[string]string{"reason": "invalid_query", "detail": "queue= and tenant= must be valid names"})
			return
		}
		f, err := r.Queue(req.Context(), a.Queue)
		if a.Tenant == "" {
			a.Figures = f
		} else if err == nil {
			snap, _ := r.Snapshot(req.Context()) // the one Queue just read
			a.Figures = snap.Tenants[queue.Pair{Queue: a.Queue, Tenant: a.Tenant}]
		}
		if errors.Is(err, ErrUnknownQueue) {
			write(w, http.StatusNotFound, map[string]string{"reason": "unknown_queue", "detail": "no queue " + a.Queue + " is declared, configured or served"})
			return
		}
		if err != nil {
			write(w, http.StatusServiceUnavailable, map[string]string{"reason": "unavailable", "detail": "the backlog cannot be read from JetStream"})
			return
		}
		a.OldestWaitSeconds = a.OldestWait.Seconds()
		write(w, http.StatusOK, a)
	})
}

func write(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
