package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// JobState is what the fleet's streams hold of a job it knows.
type JobState int

const (
	JobQueued  JobState = iota + 1 // its request is stored, no result yet (it may be starting)
	JobRunning                     // output pages are stored, no settlement yet
	JobSettled                     // its settlement is stored
)

func (s JobState) String() string {
	switch s {
	case JobQueued:
		return "queued"
	case JobRunning:
		return "running"
	case JobSettled:
		return "settled"
	}
	return "unknown"
}

// JobInfo is what a lookup found of one job.
type JobInfo struct {
	ID     string
	State  JobState
	Queue  string    // empty once the request is no longer kept
	Tenant string    // likewise
	Stored time.Time // when its request was stored; zero likewise
	// Sequence of the request in the jobs stream.
	Sequence uint64
	// Settlement is the stored settlement's JSON when State is JobSettled.
	Settlement json.RawMessage
	// PagesExpired: the job settled with output pages, and they have passed their lifetime
	// (StreamOptions.ResultsMaxAge); its settlement is kept for the job's whole record.
	PagesExpired bool
}

// Lookup says what the fleet holds of the client's tenant's job id: queued, running or settled,
// where its request was stored, and its settlement. It costs three direct gets whatever the
// backlog: the last message on the job's subject of any queue (the server walks the distinct
// queues, never the waiting jobs), and the last on its settlement and page subjects; none goes
// through the JetStream API's request queue, and no other job's body is read. An id the tenant
// holds nothing of is [ErrNotFound], whatever other tenants hold.
func (c *Client) Lookup(ctx context.Context, id string) (JobInfo, error) {
	if !job.ValidID(id) {
		return JobInfo{}, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	info, err := c.lookup(ctx, c.tenant, id)
	if err != nil {
		return info, &JobError{ID: id, Err: err}
	}
	return info, nil
}

// lookup is [Client.Lookup] of tenant's job, for a valid id. The results are read before the request: a job's
// results are stored only after its request, so a job found with neither was unknown when the
// results were read.
func (c *Client) lookup(ctx context.Context, tenant, id string) (JobInfo, error) {
	info := JobInfo{ID: id}
	results := c.subjects.ResultsStream()
	settled, err := c.lastMsg(ctx, results, c.subjects.Settled(tenant, id))
	if err != nil && !errors.Is(err, protocol.ErrNoMessage) {
		return info, err
	}
	if err == nil {
		info.State, info.Settlement = JobSettled, settled.Data
	}
	_, err = c.lastMsg(ctx, results, c.subjects.Page(tenant, id))
	switch {
	case err == nil && info.State == 0:
		info.State = JobRunning
	case errors.Is(err, protocol.ErrNoMessage) && info.State == JobSettled:
		var counts struct {
			Pages int64 `json:"pages"`
		}
		info.PagesExpired = json.Unmarshal(settled.Data, &counts) == nil && counts.Pages > 0
	case err != nil && !errors.Is(err, protocol.ErrNoMessage):
		return info, err
	}
	req, err := c.lastMsg(ctx, c.subjects.JobsStream(), c.subjects.TenantJob(tenant, id))
	switch {
	case err == nil:
		info.Queue, info.Tenant, _, _ = c.subjects.ParseJob(req.Subject)
		info.Stored, info.Sequence = req.Time, req.Sequence
		if info.State == 0 {
			info.State = JobQueued
		}
	case !errors.Is(err, protocol.ErrNoMessage):
		return info, err
	case info.State == 0:
		return info, ErrNotFound
	}
	return info, nil
}

// StoredRequest is a job's request as the jobs stream keeps it, for inspection and redrive.
type StoredRequest struct {
	Queue, Tenant string
	Sequence      uint64
	Stored        time.Time
	Header        nats.Header     // as published: traceparent, ...
	Body          json.RawMessage // the request's JSON as published; job.Request decodes it
}

// Request returns the client's tenant's job id's request as stored, read by its subject (one
// direct get). It returns
// [ErrNotFound] once the request is no longer kept (the worker's --retention, 7 days by default).
func (c *Client) Request(ctx context.Context, id string) (StoredRequest, error) {
	if !job.ValidID(id) {
		return StoredRequest{}, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	m, err := c.lastMsg(ctx, c.subjects.JobsStream(), c.subjects.TenantJob(c.tenant, id))
	if errors.Is(err, protocol.ErrNoMessage) {
		err = ErrNotFound
	}
	if err != nil {
		return StoredRequest{}, &JobError{ID: id, Err: fmt.Errorf("request: %w", err)}
	}
	r := StoredRequest{Sequence: m.Sequence, Stored: m.Time, Header: m.Header, Body: m.Data}
	r.Queue, r.Tenant, _, _ = c.subjects.ParseJob(m.Subject)
	return r, nil
}

// withCtx makes err match ctx's error too when ctx ended, whatever the library returned.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}
