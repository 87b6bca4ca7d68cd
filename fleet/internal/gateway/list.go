package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// listJobs answers one page of settled jobs: GET /v1/jobs?status=&queue=&tenant=&since=&until=&limit=&cursor=
func (g *Gateway) listJobs(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_query", err.Error())
		return
	}
	if c := callerOf(r); !c.anyTenant {
		q.Tenant = c.tenant // a tenant's key lists its own jobs only, whatever it asks
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	l, err := g.client.ListJobs(ctx, q)
	switch {
	case errors.Is(err, job.ErrInvalidQuery):
		writeError(w, http.StatusBadRequest, "invalid_query", err.Error())
	case errors.Is(err, runfleet.ErrNoService):
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no worker serves the job index; retry later")
	case err != nil:
		g.log.Warn("list jobs", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not list jobs; retry later")
	default:
		writeJSON(w, http.StatusOK, l)
	}
}

// listQuery reads a list's filter from the URL's query.
func listQuery(r *http.Request, now time.Time) (job.ListQuery, error) {
	v := r.URL.Query()
	q := job.ListQuery{Status: job.Status(v.Get("status")), Queue: v.Get("queue"), Tenant: v.Get("tenant"), Cursor: v.Get("cursor")}
	var err error
	if s := v.Get("since"); s != "" {
		if q.Since, err = job.ParseTime(s, now); err != nil {
			return q, fmt.Errorf("since: %w", err)
		}
	}
	if s := v.Get("until"); s != "" {
		if q.Until, err = job.ParseTime(s, now); err != nil {
			return q, fmt.Errorf("until: %w", err)
		}
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil {
			return q, fmt.Errorf("limit %q: %w", clip(s), job.ErrInvalidQuery)
		}
	}
	return q, q.Validate()
}
