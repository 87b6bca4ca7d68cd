package runfleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Options configure a [Client]. Zero fields take the documented defaults.
type Options struct {
	Prefix string // default job.DefaultPrefix
	// Tenant is the tenant token of the jobs this client publishes (SubmitOptions.Tenant overrides
	// it per job); default job.DefaultTenant. A NATS user may be allowed to publish under one only.
	Tenant string

	// SkipQueueCheck turns off Submit's check of the tenant's max_queued ([ErrQueueFull]). A NATS
	// user that may not read its tenant's entry of the tenants bucket nor list the jobs stream's
	// consumers (docs/protocol.md, "Permissions of a publisher") sets it: its check would wait
	// for a refused request to time out (1 s, once a minute) before letting the job through.
	SkipQueueCheck bool
	// QueueCheckTTL is how long the client trusts its copy of a tenant's max_queued and queued
	// count; default DefaultQueueCheckTTL (1 s). Longer is cheaper and lets several publishers
	// pass max_queued by more.
	QueueCheckTTL time.Duration

	// JetStream, when set, is used instead of one made on the connection: a JetStream domain or
	// API prefix is configured there (jetstream.NewWithDomain). NewClient's nc may then be nil.
	JetStream jetstream.JetStream
}

// Client publishes jobs and follows their results.
type Client struct {
	js       jetstream.JetStream
	subjects job.Subjects
	tenant   string

	skipQueueCheck bool
	queueCheckTTL  time.Duration
	checks         queueChecks
}

// NewClient returns a client on nc. It never creates or changes a stream, so that a publisher
// allowed only to publish jobs and read results can start: the fleet's workers and gateways make
// the streams, as [Inspector.EnsureStreams] does. A bad o.Prefix is an error wrapping
// [job.ErrInvalidPrefix], a bad o.Tenant one wrapping [job.ErrInvalidTenant]; ctx is unused and
// kept for a later need.
func NewClient(ctx context.Context, nc *nats.Conn, o Options) (*Client, error) {
	return newClient(nc, o)
}

// newClient is NewClient without its unused ctx, for [NewInspector] too.
func newClient(nc *nats.Conn, o Options) (*Client, error) {
	s, err := job.NewSubjects(o.Prefix)
	if err != nil {
		return nil, err
	}
	tenant := cmp.Or(o.Tenant, job.DefaultTenant)
	if !job.ValidTenant(tenant) {
		return nil, fmt.Errorf("tenant %q: %w", tenant, job.ErrInvalidTenant)
	}
	js := o.JetStream
	if js == nil {
		if nc == nil {
			return nil, errors.New("runfleet: NewClient needs a connection or Options.JetStream")
		}
		if js, err = jetstream.New(nc); err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
	}
	c := &Client{js: js, subjects: s, tenant: tenant}
	c.queueCheckOptions(o)
	return c, nil
}

// Subjects are the names this client publishes to and reads from.
func (c *Client) Subjects() job.Subjects { return c.subjects }

// Errors a lookup of a job returns, matched with errors.Is. What the client can see is what
// JetStream holds (see the package documentation).
var (
	// ErrNotFound: the fleet holds nothing of this id — no job message waits in the jobs stream
	// and no page, settlement or expiry marker is stored. Either no job with this id was ever
	// accepted, or its results expired long enough ago that their markers expired too.
	ErrNotFound = protocol.ErrNotFound
	// ErrExpired: the job was accepted and settled, but its results have passed the results
	// stream's MaxAge (24 h by default). The fleet still refuses to run the id again for as long
	// as it keeps the job's record (7 days by default).
	ErrExpired = errors.New("job results expired")
	// ErrSettled is returned by [Client.Cancel] for a job that has already settled.
	ErrSettled = errors.New("job already settled")
	// ErrNoSettlement: the job is known but has not settled, and the caller did not wait
	// ([Client.Settlement]) or stopped waiting ([Client.Watch], wrapped with ctx's error).
	ErrNoSettlement = protocol.ErrNoSettlement
	// ErrStreamFull: the jobs stream holds as many bytes as its bound (the workers'
	// --jobs-max-bytes) allows, or its servers have no room left; nothing was stored and no
	// stored job was dropped. Retrying later is safe.
	ErrStreamFull = errors.New("jobs stream full")
)

// SubmitOptions are per-job settings of a publish. The zero value is fine.
type SubmitOptions struct {
	// Header is added to the job message, e.g. a W3C traceparent (job.HeaderTraceparent),
	// which the fleet carries to every message the job produces. A Nats-Msg-Id in it is dropped:
	// JetStream's duplicate window is stream-wide, so another tenant could set the same one
	// (docs/protocol.md, "Publishing an id twice").
	Header nats.Header
	// Tenant overrides Options.Tenant for this job. The client's other calls (Lookup, Watch,
	// Cancel, ...) follow Options.Tenant's jobs only: use a client of that tenant to follow it.
	Tenant string
}

// Submitted is the outcome of a publish.
type Submitted struct {
	ID       string
	Sequence uint64 // the job's sequence in the jobs stream; 0 for a duplicate refused past the window
	// Duplicate: a job with this id was already stored on this queue and tenant, and this publish
	// added nothing. A duplicate is not an error: the id runs at most once.
	Duplicate bool
}

// Submit checks req against what the protocol fixes (job.ProtocolPolicy) and stores it on queue.
// An empty queue is job.DefaultQueue and an empty req.ID a new id (job.NewID); o may be nil. A
// request the fleet would reject for its shape is refused here with a *[job.RejectError]
// (payload_too_large for a body over the protocol's or the connection's limit), and nothing is
// stored; a worker may still reject it for its own policy (an unknown language, a limit over its
// maximum), and then the job settles rejected. It returns once JetStream has stored the job.
//
// The id it used is in its result whatever happens, and every error is a *[JobError] carrying it: a
// publish whose ack was lost may have stored the job, which the caller can then find or cancel. An
// id already stored on the same queue and tenant is reported as Duplicate, not as an error, for as
// long as the jobs stream keeps it (another tenant's job of the same id is another job); a full
// jobs stream is [ErrStreamFull]. A tenant whose policy's max_queued is reached is refused with
// [ErrQueueFull] before anything is published (an advisory check: see there).
func (c *Client) Submit(ctx context.Context, queue string, req job.Request, o *SubmitOptions) (Submitted, error) {
	body, err := encodeRequest(&req)
	if err != nil {
		return Submitted{ID: req.ID}, &JobError{ID: req.ID, Err: err}
	}
	return c.publish(ctx, queue, req.ID, body, o)
}

// encodeRequest gives req a new id when it has none, checks it against what the protocol fixes,
// and returns its body: Submit's checks before anything is sent.
func encodeRequest(req *job.Request) ([]byte, error) {
	if req.ID == "" {
		req.ID = job.NewID()
	}
	if !job.ValidID(req.ID) {
		return nil, job.ErrInvalidID
	}
	p := job.ProtocolPolicy()
	if _, err := req.Validate(p); err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if len(body) > p.MaxBodyBytes {
		return nil, &job.RejectError{Reason: job.ReasonPayloadTooLarge,
			Detail: fmt.Sprintf("body is %d bytes, at most %d", len(body), p.MaxBodyBytes)}
	}
	return body, nil
}

// SubmitRaw stores body as job id on queue without looking at it, checking the tenant's
// max_queued as Submit does.
//
// Deprecated: use [Inspector.SubmitRaw], which leaves max_queued to its caller.
func (c *Client) SubmitRaw(ctx context.Context, queue, id string, body []byte, o *SubmitOptions) (Submitted, error) {
	return c.publish(ctx, queue, id, body, o)
}

// publish stores body as job id on queue, after the max_queued check unless c skips it. Its
// results and errors are those of [Client.Submit].
func (c *Client) publish(ctx context.Context, queue, id string, body []byte, o *SubmitOptions) (Submitted, error) {
	out, err := c.prepare(ctx, queue, id, body, o)
	if err != nil {
		return Submitted{ID: id}, &JobError{ID: id, Err: err}
	}
	ack, err := c.js.PublishMsg(ctx, out.msg)
	return out.acked(ack, err)
}

// outgoing is a job message ready to publish, counted as queued for its tenant.
type outgoing struct {
	id      string
	msg     *nats.Msg
	release func() // uncounts it: nothing new was stored
}

// prepare checks the names of job id's message, builds it and reserves its place in the tenant's
// max_queued.
func (c *Client) prepare(ctx context.Context, queue, id string, body []byte, o *SubmitOptions) (outgoing, error) {
	queue = cmp.Or(queue, job.DefaultQueue)
	tenant := c.tenant
	if o != nil {
		tenant = cmp.Or(o.Tenant, tenant)
	}
	switch {
	case !job.ValidID(id):
		return outgoing{}, job.ErrInvalidID
	case !job.ValidQueue(queue):
		return outgoing{}, fmt.Errorf("queue %q: %w", queue, job.ErrInvalidQueue)
	case !job.ValidTenant(tenant):
		return outgoing{}, fmt.Errorf("tenant %q: %w", tenant, job.ErrInvalidTenant)
	}
	msg := nats.NewMsg(c.subjects.Job(queue, tenant, id))
	msg.Data = body
	if o != nil {
		for k, vs := range o.Header {
			msg.Header[k] = vs
		}
	}
	msg.Header.Del(job.HeaderMsgID)
	if nc := c.js.Conn(); nc != nil {
		if max := nc.MaxPayload(); max > 0 && int64(len(body)+headerBytes(msg.Header)) > max {
			return outgoing{}, &job.RejectError{Reason: job.ReasonPayloadTooLarge,
				Detail: fmt.Sprintf("body is %d bytes, the NATS server's max_payload %d", len(body), max)}
		}
	}
	release, err := c.reserveQueued(ctx, queue, tenant, len(body))
	if err != nil {
		return outgoing{}, err
	}
	return outgoing{id: id, msg: msg, release: release}, nil
}

// acked is the outcome of out's publish, which JetStream answered with ack or err.
func (out outgoing) acked(ack *jetstream.PubAck, err error) (Submitted, error) {
	sub := Submitted{ID: out.id}
	if err != nil || ack.Duplicate {
		out.release() // nothing new queued; an ack lost with the job stored is counted at the next read
	}
	switch {
	case err == nil:
		// A publish without Nats-Msg-Id is never acked as a duplicate: a second copy of a job is
		// refused by its subject, which only its own tenant can publish on.
		sub.Sequence, sub.Duplicate = ack.Sequence, ack.Duplicate
		return sub, nil
	case refusedDuplicate(err):
		sub.Duplicate = true
		return sub, nil
	case refusedFull(err):
		return sub, &JobError{ID: out.id, Err: fmt.Errorf("publish: %w (%w)", ErrStreamFull, err)}
	}
	return sub, &JobError{ID: out.id, Err: fmt.Errorf("publish: %w", err)}
}

// refusedDuplicate reports a publish refused because its job subject already holds a message: the
// tenant stored the id on this queue before.
func refusedDuplicate(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == protocol.ErrCodeStoreFailed &&
		strings.Contains(apiErr.Description, "maximum messages per subject")
}

// refusedFull reports a publish refused because the jobs stream reached its bytes bound, or its
// servers their storage.
func refusedFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == protocol.ErrCodeInsufficientResources ||
		apiErr.ErrorCode == protocol.ErrCodeStoreFailed && strings.Contains(apiErr.Description, "maximum bytes")
}

// headerBytes is about what h takes in a message: the NATS/1.0 line, each line, the blank line.
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// Cancel asks the fleet to cancel the client's tenant's job id, which then settles cancelled: if it
// runs, its sandbox is killed; if it waits, it never starts. Only a known job is cancelled: for an
// id the fleet holds nothing of it returns [ErrNotFound] and stores nothing, for a settled job
// [ErrSettled], so that a mistyped id is reported and never poisons a later job with it.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.cancel(ctx, c.tenant, id)
}

// cancel is [Client.Cancel] of tenant's job id.
func (c *Client) cancel(ctx context.Context, tenant, id string) error {
	if !job.ValidID(id) {
		return &JobError{ID: id, Err: job.ErrInvalidID}
	}
	info, err := c.lookup(ctx, tenant, id)
	switch {
	case err != nil:
		return &JobError{ID: id, Err: fmt.Errorf("cancel: %w", err)}
	case info.State == JobSettled:
		return &JobError{ID: id, Err: fmt.Errorf("cancel: %w", ErrSettled)}
	}
	if _, err := c.js.Publish(ctx, c.subjects.Cancel(tenant, id), nil); err != nil {
		return &JobError{ID: id, Err: fmt.Errorf("publish cancel: %w", err)}
	}
	return nil
}

// Settlement returns the client's tenant's job id's settlement without waiting. It returns an error wrapping
// [ErrNoSettlement] while the job is known and not settled, and [ErrNotFound] for an id the
// fleet holds nothing of. A settlement is kept for the job's whole record (7 days by default),
// after its pages have expired.
func (c *Client) Settlement(ctx context.Context, id string) (job.Settlement, error) {
	var st job.Settlement
	raw, err := c.SettlementJSON(ctx, id)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, &JobError{ID: id, Err: fmt.Errorf("decode settlement: %w", err)}
	}
	return st, nil
}

// SettlementJSON is [Client.Settlement] as stored: the raw JSON, so that fields this version of
// [job.Settlement] does not know yet reach the caller (a proxy, a newer fleet).
func (c *Client) SettlementJSON(ctx context.Context, id string) (json.RawMessage, error) {
	if !job.ValidID(id) {
		return nil, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	info, err := c.lookup(ctx, c.tenant, id)
	switch {
	case err != nil:
		return nil, &JobError{ID: id, Err: fmt.Errorf("settlement: %w", err)}
	case info.State != JobSettled:
		return nil, &JobError{ID: id, Err: fmt.Errorf("settlement: %w", ErrNoSettlement)}
	}
	return info.Settlement, nil
}

// Tenant is the tenant whose jobs the client's calls by id reach.
func (c *Client) Tenant() string { return c.tenant }
