package redrive

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// ClientFleet is the [Fleet] as the runfleet client reaches it: settlements and stored requests by
// direct gets, new jobs published under their tenant, each through a client of the job's tenant.
type ClientFleet struct{ *runfleet.Inspector }

var _ Fleet = ClientFleet{}

// Settlement reads tenant's job id's settlement.
func (f ClientFleet) Settlement(ctx context.Context, tenant, id string) (job.Settlement, error) {
	c, err := f.Tenant(tenant)
	if err != nil {
		return job.Settlement{}, err
	}
	return c.Settlement(ctx, id)
}

// Request reads tenant's job id's stored request and the queue of its subject.
func (f ClientFleet) Request(ctx context.Context, tenant, id string) (Stored, error) {
	c, err := f.Tenant(tenant)
	if err != nil {
		return Stored{}, err
	}
	r, err := c.Request(ctx, id)
	if err != nil {
		return Stored{}, err
	}
	var req job.Request
	if err := json.Unmarshal(r.Body, &req); err != nil {
		return Stored{}, fmt.Errorf("stored request of %s: %w", id, err)
	}
	return Stored{Queue: r.Queue, Tenant: r.Tenant, Request: req}, nil
}

// Publish stores req as a new job of queue and tenant; an id the tenant's jobs hold is a
// duplicate.
func (f ClientFleet) Publish(ctx context.Context, queue, tenant string, req job.Request) (bool, error) {
	c, err := f.Tenant(tenant)
	if err != nil {
		return false, err
	}
	sub, err := c.Submit(ctx, queue, req, nil)
	return sub.Duplicate, err
}
