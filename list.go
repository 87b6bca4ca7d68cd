package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
)

// ErrNoService: no worker of the fleet answers the job index's or the redrive's requests.
var ErrNoService = errors.New("no worker serves the job index and redrives")

// ServiceError is an error a fleet service answered with: Code is an HTTP status, Reason a short
// code (docs/protocol.md). It matches [job.ErrInvalidQuery] (400), [ErrNotFound] (not_found),
// [ErrNoSettlement] (not_settled), [ErrNotRedrivable] and [ErrMayHaveRun].
type ServiceError struct {
	Code    int
	Reason  string
	Message string
}

func (e *ServiceError) Error() string { return e.Message }

func (e *ServiceError) Is(target error) bool {
	switch target {
	case job.ErrInvalidQuery:
		return e.Code == 400
	case ErrNotFound:
		return e.Reason == job.RedriveNotFound
	case ErrNoSettlement:
		return e.Reason == job.RedriveNotSettled
	case ErrNotRedrivable:
		return e.Reason == job.RedriveNotRedrivable
	case ErrMayHaveRun:
		return e.Reason == job.RedriveMayHaveRun
	}
	return false
}

// ListJobs returns one page of the settled jobs q selects, newest first, from the index the
// fleet's workers keep (docs/protocol.md "Listing, inspecting and redriving"). Follow
// JobList.Cursor for the next page. Every job whose record is kept is listed.
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

// CountJobs returns how many settled jobs each filter of c selects, in one round trip to the
// fleet's job index: an overview's figures per queue and tenant without a request each.
// ErrNoService when no worker serves the index.
func (c *Client) CountJobs(ctx context.Context, q job.CountQuery) ([]int64, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out job.JobCounts
	if err := c.request(ctx, c.subjects.CountJobs(), q, &out); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	if len(out.Counts) != len(q.Queries) {
		return nil, fmt.Errorf("count jobs: %d counts for %d filters", len(out.Counts), len(q.Queries))
	}
	return out.Counts, nil
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
	if msg := m.Header.Get("Nats-Service-Error"); msg != "" {
		code, _ := strconv.Atoi(m.Header.Get("Nats-Service-Error-Code"))
		return &ServiceError{Code: code, Reason: m.Header.Get("Runfleet-Reason"), Message: msg}
	}
	return json.Unmarshal(m.Data, out)
}
