package redrive

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// ClientFleet is the [Fleet] as the runfleet client reaches it: settlements and stored requests by
// direct gets, new jobs published under their tenant.
type ClientFleet struct{ *runfleet.Client }

var _ Fleet = ClientFleet{}

// Request reads job id's stored request and the queue and tenant of its subject.
func (f ClientFleet) Request(ctx context.Context, id string) (Stored, error) {
	r, err := f.Client.Request(ctx, id)
	if err != nil {
		return Stored{}, err
	}
	var req job.Request
	if err := json.Unmarshal(r.Body, &req); err != nil {
		return Stored{}, fmt.Errorf("stored request of %s: %w", id, err)
	}
	return Stored{Queue: r.Queue, Tenant: r.Tenant, Request: req}, nil
}

// Publish stores req as a new job of queue and tenant; an id the stream holds is a duplicate.
func (f ClientFleet) Publish(ctx context.Context, queue, tenant string, req job.Request) (bool, error) {
	sub, err := f.Client.Submit(ctx, queue, req, &runfleet.SubmitOptions{Tenant: tenant})
	return sub.Duplicate, err
}
