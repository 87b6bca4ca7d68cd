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

// ErrNoIndex: no worker of the fleet answers list requests.
var ErrNoIndex = errors.New("no worker serves the job index")

// ServiceError is an error a fleet service answered with: Code is an HTTP status (400 for a bad
// request, which wraps job.ErrInvalidQuery for a list).
type ServiceError struct {
	Code    int
	Message string
}

func (e *ServiceError) Error() string { return e.Message }

// Is makes a 400 answer to a list match [job.ErrInvalidQuery].
func (e *ServiceError) Is(target error) bool {
	return target == job.ErrInvalidQuery && e.Code == 400
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
		return ErrNoIndex
	}
	if err != nil {
		return err
	}
	if msg := m.Header.Get("Nats-Service-Error"); msg != "" {
		code, _ := strconv.Atoi(m.Header.Get("Nats-Service-Error-Code"))
		return &ServiceError{Code: code, Message: msg}
	}
	return json.Unmarshal(m.Data, out)
}
