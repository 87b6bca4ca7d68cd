package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/runfleet/runfleet"
)

// inspection is GET /v1/jobs/{id}?request=true: the settlement's own fields, as the plain GET
// returns them (only job_id while the job has not settled), so that a reader of either finds
// status at the top, and beside them the stored request, its queue and tenant, and the settlement
// again as one value (null while the job has not settled).
func inspection(id string, req runfleet.StoredRequest, settlement json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if settlement == nil {
		settlement = json.RawMessage("null")
		jid, _ := json.Marshal(id)
		out["job_id"] = jid
	} else if err := json.Unmarshal(settlement, &out); err != nil {
		return nil, fmt.Errorf("settlement of %s: %w", id, err)
	}
	q, _ := json.Marshal(req.Queue)
	t, _ := json.Marshal(req.Tenant)
	out["queue"], out["tenant"], out["request"], out["settlement"] = q, t, req.Body, settlement
	return out, nil
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
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	req, err := c.Request(ctx, id)
	switch {
	case errors.Is(err, runfleet.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "the fleet keeps no request of job "+id)
		return
	case err != nil:
		g.log.Warn("read stored request", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the request; retry later")
		return
	}
	raw, err := c.SettlementJSON(ctx, id)
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement) || errors.Is(err, runfleet.ErrNotFound) || errors.Is(err, runfleet.ErrExpired):
		raw = nil
	case err != nil:
		g.log.Warn("read settlement", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the settlement; retry later")
		return
	}
	out, err := inspection(id, req, raw)
	if err != nil {
		g.log.Error("inspect", "job_id", id, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the stored settlement does not decode")
		return
	}
	writeJSON(w, http.StatusOK, out)
}
