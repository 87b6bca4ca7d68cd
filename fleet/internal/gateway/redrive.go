package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// redrive runs one settled job again: POST /v1/jobs/{id}/redrive, body {"confirm_may_have_run": true}
// or none.
func (g *Gateway) redrive(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	var body job.RedriveRequest
	if !g.readJSON(w, r, &body) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	out, err := c.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: body.ConfirmMayHaveRun})
	if err != nil {
		g.serviceError(w, "redrive", err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+out.JobID)
	code := http.StatusCreated
	if out.Duplicate {
		code = http.StatusOK
	}
	writeJSON(w, code, out)
}

// bulkBody is POST /v1/redrives's body: the list's filter (since and until as an RFC 3339 time or
// a duration ago), the pace, the confirmation and the dry run.
type bulkBody struct {
	Status            job.Status `json:"status"`
	Queue             string     `json:"queue"`
	Tenant            string     `json:"tenant"`
	Since             string     `json:"since"`
	Until             string     `json:"until"`
	RatePerS          float64    `json:"rate_per_s"`
	ConfirmMayHaveRun bool       `json:"confirm_may_have_run"`
	DryRun            bool       `json:"dry_run"`
}

// startRedrive starts a bulk redrive, or with dry_run counts its jobs: POST /v1/redrives.
func (g *Gateway) startRedrive(w http.ResponseWriter, r *http.Request) {
	var body bulkBody
	if !g.readJSON(w, r, &body) {
		return
	}
	b := job.BulkRedrive{Status: body.Status, Queue: body.Queue, Tenant: body.Tenant, RatePerS: body.RatePerS,
		ConfirmMayHaveRun: body.ConfirmMayHaveRun, DryRun: body.DryRun}
	now := time.Now()
	var err error
	if body.Since != "" {
		b.Since, err = job.ParseTime(body.Since, now)
	}
	if err == nil && body.Until != "" {
		b.Until, err = job.ParseTime(body.Until, now)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_query", err.Error())
		return
	}
	if c := callerOf(r); !c.anyTenant {
		b.Tenant = c.tenant // a tenant's key redrives its own jobs only
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	run, err := g.inspector.StartRedrive(ctx, b)
	switch {
	case err != nil:
		g.serviceError(w, "start redrive", err)
	case b.DryRun:
		writeJSON(w, http.StatusOK, run)
	default:
		w.Header().Set("Location", "/v1/redrives/"+run.ID)
		writeJSON(w, http.StatusAccepted, run)
	}
}

// redriveRun answers a bulk redrive's progress (GET) or stops it (DELETE): /v1/redrives/{id}.
func (g *Gateway) redriveRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	if c := callerOf(r); !c.anyTenant {
		// A run of another tenant is answered as one the fleet does not hold; so is an
		// unknown one, by the same words.
		run, err := g.inspector.RedriveRun(ctx, id)
		if errors.Is(err, runfleet.ErrNotFound) || err == nil && run.Filter.Tenant != c.tenant {
			writeError(w, http.StatusNotFound, protocol.ReasonNotFound, "the fleet holds no redrive run "+id)
			return
		}
		if err != nil {
			g.serviceError(w, "redrive run", err)
			return
		}
	}
	get := g.inspector.RedriveRun
	if r.Method == http.MethodDelete {
		get = g.inspector.StopRedrive
	}
	run, err := get(ctx, id)
	if err != nil {
		g.serviceError(w, "redrive run", err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// serviceError answers an error of the fleet's index or redrive service.
func (g *Gateway) serviceError(w http.ResponseWriter, what string, err error) {
	var se *protocol.ServiceError
	switch {
	case errors.As(err, &se) && se.Code < 500:
		reason := se.Reason
		if reason == "" {
			reason = protocol.ReasonInvalidQuery
		}
		writeError(w, se.Code, reason, se.Message)
	case errors.Is(err, job.ErrInvalidQuery), errors.Is(err, job.ErrInvalidID):
		writeError(w, http.StatusBadRequest, protocol.ReasonInvalidQuery, err.Error())
	case errors.Is(err, runfleet.ErrNoService):
		writeError(w, http.StatusServiceUnavailable, protocol.ReasonUnavailable, "no worker serves the job index and redrives; retry later")
	default:
		g.log.Warn(what, "err", err)
		writeError(w, http.StatusServiceUnavailable, protocol.ReasonUnavailable, "the fleet did not answer; retry later")
	}
}

// readJSON decodes a small optional JSON body into v; an empty body leaves v as it is.
func (g *Gateway) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := g.readBody(w, r)
	if err == nil && len(b) > 0 {
		if jerr := json.Unmarshal(b, v); jerr != nil {
			err = &job.RejectError{Reason: job.ReasonInvalidJSON, Detail: jerr.Error()}
		}
	}
	if err != nil {
		writeReject(w, err)
		return false
	}
	return true
}
