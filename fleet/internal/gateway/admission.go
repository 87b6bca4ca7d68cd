package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/job"
)

// DefaultMaxWaiting bounds the requests that wait for a settlement at once (?wait=true and
// /v1/sandbox/run).
const DefaultMaxWaiting = 10_000

// Why a request is refused before anything is stored: each is a 503 with Retry-After.
var (
	errTooManyWaiting = errors.New("too many requests waiting")
	errDraining       = errors.New("the gateway is shutting down")
	errDisconnected   = errors.New("the fleet's NATS is unreachable")
)

// admission counts the waiting requests. A slot is taken before the job is published and given
// back when the wait ends, so that a request the gateway could not follow is never stored.
type admission struct {
	max     int64
	waiting atomic.Int64
}

// admit takes a slot, or says why the request cannot be followed to its end.
func (g *Gateway) admit() (release func(), err error) {
	switch {
	case g.draining.Load():
		return nil, errDraining
	case !g.nc.IsConnected():
		return nil, errDisconnected
	}
	for {
		n := g.admission.waiting.Load()
		if n >= g.admission.max {
			return nil, errTooManyWaiting
		}
		if g.admission.waiting.CompareAndSwap(n, n+1) {
			break
		}
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			g.admission.waiting.Add(-1)
		}
	}, nil
}

// refusalReason is the native reason of a refusal by admit.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, errTooManyWaiting):
		return "too_many_waiting"
	case errors.Is(err, errDraining):
		return "draining"
	}
	return "unavailable"
}

// refused reports an error of a publish that stored nothing: a refusal decided before the
// publish (a request the connection cannot carry, a bad name, a tenant's max_queued or storage
// bound, an undeclared queue), no stream listening, or the stream's own refusal (a full jobs
// stream among them). Retrying such a publish
// as unconfirmed would answer "may have been stored" for a job that never was.
func refused(err error) bool {
	var rej *job.RejectError
	var api *jetstream.APIError
	return errors.As(err, &rej) || errors.As(err, &api) ||
		errors.Is(err, runfleet.ErrQueueFull) || errors.Is(err, runfleet.ErrStreamFull) ||
		errors.Is(err, runfleet.ErrStorageFull) || errors.Is(err, runfleet.ErrUnknownQueue) ||
		errors.Is(err, job.ErrInvalidID) || errors.Is(err, job.ErrInvalidQueue) || errors.Is(err, job.ErrInvalidTenant) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// errUnconfirmed is a publish whose outcome is unknown: JetStream may have stored the job.
var errUnconfirmed = errors.New("the fleet did not confirm the request; it may have been stored")

// publishRetry is the pause between tries of a publish that timed out.
const publishRetry = 200 * time.Millisecond

// store runs pub until JetStream acknowledges it, within publishTimeout. pub publishes with the
// job's id as Nats-Msg-Id, so a try after one that timed out but was stored is a duplicate and
// stores nothing more. It returns a refusal as it is when nothing was stored (refused), and
// errUnconfirmed when no try was acknowledged. The caller checks the connection before: a publish
// that fails on the way may still have been sent.
func (g *Gateway) store(ctx context.Context, pub func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	for {
		err := pub(ctx)
		if err == nil || refused(err) {
			return err
		}
		g.log.Warn("publish unconfirmed: trying again", "err", err)
		select {
		case <-ctx.Done():
			return errors.Join(errUnconfirmed, err)
		case <-time.After(publishRetry):
		}
	}
}

// submission is a job a route asks the gateway to store.
type submission struct {
	api    string // the route's API as metrics name it: native, dify, piston, judge0
	tenant string
	queue  string
	id     string
	fresh  bool   // id is a new uuid the gateway made: no job holds it yet
	body   []byte // the request as stored
	waits  bool   // the caller waits for the settlement: admitted against Options.MaxWaiting
}

// jobSubmission is jr as the route of a compatible API (dify-sandbox, piston, judge0) submits it
// for tenant: on the gateway's queue, as JSON, where a "<" takes 6 bytes, so that the size submit
// bounds is the stored one's. Those APIs have no ids of their own: jr.ID is a new uuid.
func (g *Gateway) jobSubmission(api, tenant string, jr job.Request, waits bool) submission {
	body, err := json.Marshal(jr)
	if err != nil {
		panic(err) // a request is plain data: it always encodes
	}
	return submission{api: api, tenant: tenant, queue: g.o.Queue, id: jr.ID, fresh: true, body: body, waits: waits}
}

// submitError is why submit did not store a job, or cannot tell whether it did (unconfirmed): the
// native reason, and the HTTP status and Retry-After every API answers it with, each route in its
// own envelope (docs/protocol.md, "HTTP gateway").
type submitError struct {
	reason     string // the native reason: unknown_queue, tenant_storage_full, tenant_queue_full, ...
	status     int
	detail     string
	retryAfter int   // seconds; 0 sends no Retry-After
	err        error // what refused it: a *queueFullError or *protocol.StorageFullError fills the native body
}

func (e *submitError) Error() string { return e.reason + ": " + e.detail }

func (e *submitError) Unwrap() error { return e.err }

// setRetryAfter tells the client of w when a retry may succeed, if it may.
func (e *submitError) setRetryAfter(w http.ResponseWriter) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
}

// asSubmitError is err, an error of submit, as what it is.
func asSubmitError(err error) *submitError {
	var e *submitError
	errors.As(err, &e)
	return e
}

// Retry-After of the refusals that do not come from a tenant's bound: refusedRetry of a request
// refused before anything was stored; streamFullRetry of a jobs_stream_full, whose room comes back
// as kept requests expire, not within a second.
const (
	refusedRetry    = 1
	streamFullRetry = 10
)

// submit stores s's job under the checks of every route, in this order (docs/protocol.md,
// "Tenants at the gateway"): the body's size as stored, a queue declared for the tenant, its
// storage bounds, its max_queued, and the gateway's admission of a waiting request (or, for one
// that does not wait, a connection to NATS). A refusal stores nothing and is counted per tenant.
// The publish is under a send span, and an id the tenant holds on any queue is a duplicate,
// stored once (publishOnce); an id the gateway made is looked up only when a try is repeated.
// Every error is a *submitError; release ends a waiting submission's place among
// Options.MaxWaiting, once its wait ends.
func (g *Gateway) submit(r *http.Request, s submission) (release func(), err error) {
	refuse := func(e *submitError) (func(), error) {
		g.refused(s.tenant, e.reason)
		return nil, e
	}
	if len(s.body) > g.policy.MaxBodyBytes {
		return nil, rejected(&job.RejectError{Reason: job.ReasonPayloadTooLarge,
			Detail: fmt.Sprintf("the request is %d bytes as stored, at most %d", len(s.body), g.policy.MaxBodyBytes)})
	}
	ctx := r.Context()
	if err := g.queueAllowed(ctx, s.queue, s.tenant); err != nil {
		return refuse(&submitError{reason: "unknown_queue", status: http.StatusNotFound, detail: err.Error() + "; nothing was stored", err: err})
	}
	unstore, err := g.admitStorage(ctx, s.tenant, len(s.body))
	if err != nil {
		return refuse(&submitError{reason: "tenant_storage_full", status: http.StatusTooManyRequests,
			detail: err.Error() + "; nothing was stored", retryAfter: storageFullRetry, err: err})
	}
	unreserve, err := g.reserve(ctx, s.tenant)
	if err != nil {
		unstore()
		return refuse(&submitError{reason: "tenant_queue_full", status: http.StatusTooManyRequests,
			detail: err.Error(), retryAfter: queueFullRetry, err: err})
	}
	unreserve = both(unreserve, unstore)
	// A waiting request takes its place before the job is stored: one the gateway could not
	// follow is refused with nothing stored. One that does not wait needs the connection: a
	// publish that fails on the way may still have been sent (store).
	release = func() {}
	if s.waits {
		release, err = g.admit()
	} else if !g.nc.IsConnected() {
		err = errDisconnected
	}
	if err != nil {
		unreserve()
		return refuse(&submitError{reason: refusalReason(err), status: http.StatusServiceUnavailable,
			detail: err.Error() + "; nothing was stored, retry later", retryAfter: refusedRetry, err: err})
	}
	c := g.as(s.tenant)
	var sub runfleet.Submitted
	sendCtx, span := g.send(r, s.queue, s.tenant, s.id)
	// A fresh id's first try needs no duplicate lookup; a try after one that timed out does,
	// since that one may have been stored.
	lookup := !s.fresh
	err = g.store(sendCtx, func(ctx context.Context) error {
		var err error
		sub, err = g.publishOnce(ctx, c, s.queue, s.id, s.body, lookup)
		lookup = true
		return err
	})
	tracing.End(span, err)
	if err != nil || sub.Duplicate {
		unreserve()
	}
	if err != nil {
		release()
		return nil, g.publishFailed(s.id, err)
	}
	g.submitted(s.api, s.tenant)
	return release, nil
}

// rejected is a request the protocol rejects, as submit answers it: 400 with its reason.
func rejected(rej *job.RejectError) *submitError {
	return &submitError{reason: string(rej.Reason), status: http.StatusBadRequest, detail: rej.Detail, err: rej}
}

// publishFailed is the submitError of job id's publish, which store did not see acknowledged.
func (g *Gateway) publishFailed(id string, err error) *submitError {
	var rej *job.RejectError
	if errors.As(err, &rej) {
		return rejected(rej)
	}
	g.log.Warn("publish", "job_id", id, "err", err)
	switch {
	case errors.Is(err, runfleet.ErrStreamFull):
		return &submitError{reason: "jobs_stream_full", status: http.StatusServiceUnavailable, retryAfter: streamFullRetry, err: err,
			detail: "the fleet's jobs stream is full (its --jobs-max-bytes, or the servers' storage); nothing was stored, retry later"}
	case errors.Is(err, errUnconfirmed):
		return &submitError{reason: "unconfirmed", status: http.StatusGatewayTimeout, err: err,
			detail: "the fleet did not confirm job " + id + "; it may have been stored and may run: GET /v1/jobs/" + id}
	}
	return &submitError{reason: "unavailable", status: http.StatusServiceUnavailable, retryAfter: refusedRetry, err: err,
		detail: "the fleet did not store the request; nothing was stored, retry later"}
}
