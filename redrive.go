package runfleet

import (
	"context"
	"fmt"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Errors of a redrive, besides [ErrNotFound] and [ErrNoSettlement] (the job has not settled).
var (
	// ErrNotRedrivable: the job succeeded or was rejected; neither is redriven.
	ErrNotRedrivable = protocol.ErrNotRedrivable
	// ErrMayHaveRun: the job settled unknown, so its code may have run; redrive it only with
	// RedriveOptions.ConfirmMayHaveRun.
	ErrMayHaveRun = protocol.ErrMayHaveRun
)

// RedriveOptions are the options of [Client.Redrive].
type RedriveOptions struct {
	// ConfirmMayHaveRun allows redriving a job that settled unknown, whose code may have run.
	ConfirmMayHaveRun bool
}

// Redrive asks the fleet to run the client's tenant's settled job id again: its stored request is published as a new
// job, whose request and settlement carry redrive_of. The old job never changes. Repeating the
// call returns the same new job (Redriven.Duplicate); to run it once more, redrive the new one.
func (c *Client) Redrive(ctx context.Context, id string, o *RedriveOptions) (job.Redriven, error) {
	if !job.ValidID(id) {
		return job.Redriven{}, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	r := job.RedriveRequest{JobID: id, Tenant: c.tenant}
	if o != nil {
		r.ConfirmMayHaveRun = o.ConfirmMayHaveRun
	}
	var out job.Redriven
	if err := c.request(ctx, c.subjects.Redrive(), r, &out); err != nil {
		return job.Redriven{}, &JobError{ID: id, Err: fmt.Errorf("redrive: %w", err)}
	}
	return out, nil
}

// StartRedrive starts a bulk redrive of the jobs b selects.
//
// Deprecated: use [Inspector.StartRedrive].
func (c *Client) StartRedrive(ctx context.Context, b job.BulkRedrive) (job.RedriveRun, error) {
	return c.inspector().StartRedrive(ctx, b)
}

// RedriveRun returns the progress of bulk run id.
//
// Deprecated: use [Inspector.RedriveRun].
func (c *Client) RedriveRun(ctx context.Context, id string) (job.RedriveRun, error) {
	return c.inspector().RedriveRun(ctx, id)
}

// StopRedrive stops bulk run id before its next job.
//
// Deprecated: use [Inspector.StopRedrive].
func (c *Client) StopRedrive(ctx context.Context, id string) (job.RedriveRun, error) {
	return c.inspector().StopRedrive(ctx, id)
}
