package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// ErrNoService: no worker of the fleet answers the job index's or the redrive's requests.
var ErrNoService = errors.New("no worker serves the job index and redrives")

// ServiceError is an error a fleet service answered with (see [protocol.ServiceError]).
//
// Deprecated: use [protocol.ServiceError], the same type.
type ServiceError = protocol.ServiceError

// ListJobs returns one page of the settled jobs q selects, newest first, from the index the
// fleet's workers keep (docs/protocol.md "Listing, inspecting and redriving"). Follow
// JobList.Cursor for the next page, or range over [Client.Jobs], which does. Every job whose
// record is kept is listed.
func (c *Client) ListJobs(ctx context.Context, q job.ListQuery) (job.JobList, error) {
	if err := q.Validate(); err != nil {
		return job.JobList{}, err
	}
	var l job.JobList
	if err := c.request(ctx, c.subjects.ListJobs(), q, &l); err != nil {
		return job.JobList{}, fmt.Errorf("list jobs: %w", err)
	}
	return l, nil
}

// Jobs yields the settled jobs q selects, newest first, asking for one page of q.Limit rows at a
// time (job.DefaultListLimit when zero) from q.Cursor on, as the consumer ranges. An error is
// yielded once, last. q.Count is ignored: [Client.ListJobs] returns the count.
//
//	for j, err := range c.Jobs(ctx, job.ListQuery{Status: job.StatusFailed}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(j.JobID, j.Reason)
//	}
func (c *Client) Jobs(ctx context.Context, q job.ListQuery) iter.Seq2[job.Listed, error] {
	return func(yield func(job.Listed, error) bool) {
		q.Count = false
		for {
			page, err := c.ListJobs(ctx, q)
			if err != nil {
				yield(job.Listed{}, err)
				return
			}
			for _, j := range page.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if page.Cursor == "" || len(page.Jobs) == 0 {
				return
			}
			q.Cursor = page.Cursor
		}
	}
}

// CountJobs returns how many settled jobs each filter of q selects.
//
// Deprecated: use [Inspector.CountJobs].
func (c *Client) CountJobs(ctx context.Context, q job.CountQuery) ([]int64, error) {
	return c.inspector().CountJobs(ctx, q)
}

// request asks the fleet's service on subject and decodes its answer into out.
func (c *Client) request(ctx context.Context, subject string, in, out any) error {
	nc := c.js.Conn()
	if nc == nil {
		return errors.New("no NATS connection")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	m, err := nc.RequestWithContext(ctx, subject, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoService
	}
	if err != nil {
		return err
	}
	if se := protocol.ErrorOf(m.Header); se != nil {
		return se
	}
	return json.Unmarshal(m.Data, out)
}
