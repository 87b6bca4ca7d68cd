package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/runfleet/runfleet"
)

// inspection is GET /v1/jobs/{id}?request=true: the stored request beside the settlement (null
// while the job has not settled).
type inspection struct {
	Queue      string          `json:"queue"`
	Tenant     string          `json:"tenant"`
	Request    json.RawMessage `json:"request"`
	Settlement json.RawMessage `json:"settlement"`
}

// jobOrInspect answers GET /v1/jobs/{id}: the settlement, or with ?request=true the inspection.
func (g *Gateway) jobOrInspect(w http.ResponseWriter, r *http.Request) {
	withRequest, err := boolParam(r.URL.Query().Get("request"), false)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_query", "request: "+err.Error())
		return
	}
	if !withRequest {
		g.settlement(w, r)
		return
	}
	id, ok := pathID(w, r)
	if !ok || !g.owned(w, r, id) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	req, err := g.client.Request(ctx, id)
	switch {
	case errors.Is(err, runfleet.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "the fleet keeps no request of job "+id)
		return
	case err != nil:
		g.log.Warn("read stored request", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the request; retry later")
		return
	}
	out := inspection{Queue: req.Queue, Tenant: req.Tenant, Request: req.Body, Settlement: json.RawMessage("null")}
	raw, err := g.client.SettlementJSON(ctx, id)
	switch {
	case err == nil:
		out.Settlement = raw
	case !errors.Is(err, runfleet.ErrNoSettlement) && !errors.Is(err, runfleet.ErrNotFound) && !errors.Is(err, runfleet.ErrExpired):
		g.log.Warn("read settlement", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the settlement; retry later")
		return
	}
	writeJSON(w, http.StatusOK, out)
}
