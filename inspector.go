package runfleet

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Inspector is the operator's handle on a fleet, as asynq's Inspector is on its queues: it makes
// the streams, counts settled jobs, runs bulk redrives and stores exact bytes as a job. A service
// that submits and follows jobs needs only a [Client], and its NATS user may be refused all of
// this (docs/protocol.md, "Permissions of a publisher").
type Inspector struct {
	// c makes its requests and publishes; it never checks max_queued.
	c *Client
}

// InspectorOptions configure an [Inspector]. Zero fields take the documented defaults.
type InspectorOptions struct {
	Prefix string // default job.DefaultPrefix
	// JetStream, when set, is used instead of one made on the connection, as Options.JetStream.
	JetStream jetstream.JetStream
}

// NewInspector returns an inspector on nc. A bad o.Prefix is an error wrapping
// [job.ErrInvalidPrefix].
func NewInspector(nc *nats.Conn, o InspectorOptions) (*Inspector, error) {
	c, err := newClient(nc, Options{Prefix: o.Prefix, JetStream: o.JetStream, SkipQueueCheck: true})
	if err != nil {
		return nil, err
	}
	return &Inspector{c: c}, nil
}

// Subjects are the names the inspector reads and writes.
func (i *Inspector) Subjects() job.Subjects { return i.c.subjects }

// EnsureStreams creates the fleet's streams and artifacts bucket when they are missing, as
// [protocol.EnsureStreams] does.
func (i *Inspector) EnsureStreams(ctx context.Context, o protocol.StreamOptions) error {
	return protocol.EnsureStreams(ctx, i.c.js, i.c.subjects, o)
}

// SubmitRaw stores body as job id on queue without looking at it; the worker validates it. It is
// for tools, tests and the gateway, which need to send exactly the bytes they have. It does not
// check the tenant's max_queued: a caller that admits jobs for tenants (the gateway) checks it
// once, itself. A body the connection cannot carry is refused with a *[job.RejectError]
// payload_too_large; o.Tenant defaults to job.DefaultTenant. Its results and errors are those of
// [Client.Submit].
func (i *Inspector) SubmitRaw(ctx context.Context, queue, id string, body []byte, o *SubmitOptions) (Submitted, error) {
	return i.c.publish(ctx, queue, id, body, o)
}

// Tenant returns a client that acts for tenant on the inspector's connection: its calls by id
// (Lookup, Request, Settlement, Watch, Cancel, Redrive, artifacts) reach that tenant's jobs, and
// it never checks max_queued. A job is its tenant and its id: two tenants' jobs of one id are
// two jobs ([Inspector.Tenants] finds them).
func (i *Inspector) Tenant(name string) (*Client, error) {
	if !job.ValidTenant(name) {
		return nil, fmt.Errorf("tenant %q: %w", name, job.ErrInvalidTenant)
	}
	return &Client{js: i.c.js, subjects: i.c.subjects, tenant: name, skipQueueCheck: true}, nil
}

// Tenants returns the tenants whose jobs of id the jobs stream keeps, sorted: one stream info
// with a subjects filter (the server reads its subject index, never the messages). It is empty
// when none is kept (results may outlive the request: look each candidate up with
// [Inspector.Tenant]).
func (i *Inspector) Tenants(ctx context.Context, id string) ([]string, error) {
	if !job.ValidID(id) {
		return nil, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	st, err := i.c.js.Stream(ctx, i.c.subjects.JobsStream())
	if err != nil {
		return nil, &JobError{ID: id, Err: fmt.Errorf("tenants: %w", err)}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(i.c.subjects.JobByID(id)))
	if err != nil {
		return nil, &JobError{ID: id, Err: fmt.Errorf("tenants: %w", err)}
	}
	var tenants []string
	for subject := range info.State.Subjects {
		if _, tenant, _, err := i.c.subjects.ParseJob(subject); err == nil && !slices.Contains(tenants, tenant) {
			tenants = append(tenants, tenant)
		}
	}
	slices.Sort(tenants)
	return tenants, nil
}

// CountJobs returns how many settled jobs each filter of q selects, in one round trip to the
// fleet's job index: an overview's figures per queue and tenant without a request each.
// ErrNoService when no worker serves the index.
func (i *Inspector) CountJobs(ctx context.Context, q job.CountQuery) ([]int64, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out job.JobCounts
	if err := i.c.request(ctx, i.c.subjects.CountJobs(), q, &out); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	if len(out.Counts) != len(q.Queries) {
		return nil, fmt.Errorf("count jobs: %d counts for %d filters", len(out.Counts), len(q.Queries))
	}
	return out.Counts, nil
}

// StartRedrive starts a bulk redrive of the jobs b selects, run by one of the fleet's workers at
// b.RatePerS; with b.DryRun it only counts them (RedriveRun.Total) and starts nothing.
func (i *Inspector) StartRedrive(ctx context.Context, b job.BulkRedrive) (job.RedriveRun, error) {
	if err := b.Query().Validate(); err != nil {
		return job.RedriveRun{}, err
	}
	var out job.RedriveRun
	if err := i.c.request(ctx, i.c.subjects.RedriveStart(), b, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("start redrive: %w", err)
	}
	return out, nil
}

// RedriveRun returns the progress of bulk run id.
func (i *Inspector) RedriveRun(ctx context.Context, id string) (job.RedriveRun, error) {
	var out job.RedriveRun
	if err := i.c.request(ctx, i.c.subjects.RedriveRun(), map[string]string{"id": id}, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("redrive run %s: %w", id, err)
	}
	return out, nil
}

// StopRedrive stops bulk run id before its next job; the jobs it published stay.
func (i *Inspector) StopRedrive(ctx context.Context, id string) (job.RedriveRun, error) {
	var out job.RedriveRun
	if err := i.c.request(ctx, i.c.subjects.RedriveStop(), map[string]string{"id": id}, &out); err != nil {
		return job.RedriveRun{}, fmt.Errorf("stop redrive run %s: %w", id, err)
	}
	return out, nil
}

// inspector is c's operator calls, for the deprecated methods that forward to them: c's own
// connection and subjects, without its max_queued check.
func (c *Client) inspector() *Inspector {
	return &Inspector{c: &Client{js: c.js, subjects: c.subjects, tenant: c.tenant, skipQueueCheck: true}}
}
