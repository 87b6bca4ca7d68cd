package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
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
