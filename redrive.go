package runfleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/runfleet/runfleet/job"
)

// Errors of a redrive, besides [ErrNotFound] and [ErrNoSettlement] (the job has not settled).
var (
	// ErrNotRedrivable: the job succeeded or was rejected; neither is redriven.
	ErrNotRedrivable = errors.New("job not redrivable")
	// ErrMayHaveRun: the job settled unknown, so its code may have run; redrive it only with
	// RedriveOptions.ConfirmMayHaveRun.
	ErrMayHaveRun = errors.New("job may have run: confirm to redrive it")
)

// RedriveOptions are the options of [Client.Redrive].
type RedriveOptions struct {
	// ConfirmMayHaveRun allows redriving a job that settled unknown, whose code may have run.
	ConfirmMayHaveRun bool
}

// Redrive asks the fleet to run settled job id again: its stored request is published as a new
// job, whose request and settlement carry redrive_of. The old job never changes. Repeating the
// call returns the same new job (Redriven.Duplicate); to run it once more, redrive the new one.
func (c *Client) Redrive(ctx context.Context, id string, o *RedriveOptions) (job.Redriven, error) {
	if !job.ValidID(id) {
		return job.Redriven{}, fmt.Errorf("job %q: %w", id, job.ErrInvalidID)
	}
	r := job.RedriveRequest{JobID: id}
	if o != nil {
		r.ConfirmMayHaveRun = o.ConfirmMayHaveRun
	}
	var out job.Redriven
	if err := c.request(ctx, c.subjects.Redrive(), r, &out); err != nil {
		return job.Redriven{}, fmt.Errorf("redrive %s: %w", id, err)
	}
	return out, nil
}

// StartRedrive starts a bulk redrive of the jobs b selects, run by one of the fleet's workers at
// b.RatePerS; with b.DryRun it only counts them (RedriveRun.Total) and starts nothing.
func (c *Client) StartRedrive(ctx context.Context, b job.BulkRedrive) (job.RedriveRun, error) {
	if err := b.Query().Validate(); err != nil {
		return job.RedriveRun{}, err
	}
	var out job.RedriveRun
	if err := c.request(ctx, c.subjects.RedriveStart(), b, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("start redrive: %w", err)
	}
	return out, nil
}

// RedriveRun returns the progress of bulk run id.
func (c *Client) RedriveRun(ctx context.Context, id string) (job.RedriveRun, error) {
	var out job.RedriveRun
	if err := c.request(ctx, c.subjects.RedriveRun(), map[string]string{"id": id}, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("redrive run %s: %w", id, err)
	}
	return out, nil
}

// StopRedrive stops bulk run id before its next job; the jobs it published stay.
func (c *Client) StopRedrive(ctx context.Context, id string) (job.RedriveRun, error) {
	var out job.RedriveRun
	if err := c.request(ctx, c.subjects.RedriveStop(), map[string]string{"id": id}, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("stop redrive run %s: %w", id, err)
	}
	return out, nil
}
