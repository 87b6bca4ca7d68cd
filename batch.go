package runfleet

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// SubmitResult is one job's outcome in [Client.SubmitMany]: what [Client.Submit] would have
// returned for it.
type SubmitResult struct {
	Submitted
	Err error // nil, or a *JobError naming Submitted.ID
}

// SubmitMany stores reqs on queue as [Client.Submit] does, one job each, and returns one result
// per request in the same order; one request's error does not stop the others. The messages are
// published without waiting for each ack (JetStream's asynchronous publish), then every ack is
// awaited, so a batch takes about one round trip instead of one per job. o applies to every job;
// requests without an id get new ones.
//
// The acks are awaited until ctx ends, or for the client's default timeout (5 s) when ctx has no
// deadline: a job whose ack did not come in time has an error wrapping ctx's, and may have been
// stored, as after a Submit whose ack was lost.
func (c *Client) SubmitMany(ctx context.Context, queue string, reqs []job.Request, o *SubmitOptions) []SubmitResult {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.requestTimeout())
		defer cancel()
	}
	results := make([]SubmitResult, len(reqs))
	type pending struct {
		i   int
		out outgoing
		f   jetstream.PubAckFuture
	}
	var waiting []pending
	for i, req := range reqs {
		body, err := encodeRequest(&req)
		results[i].ID = req.ID
		if err != nil {
			results[i].Err = &JobError{ID: req.ID, Err: err}
			continue
		}
		out, err := c.prepare(ctx, queue, req.ID, body, o)
		if err != nil {
			results[i].Err = &JobError{ID: req.ID, Err: err}
			continue
		}
		f, err := c.js.PublishMsgAsync(out.msg)
		if err != nil {
			results[i].Submitted, results[i].Err = out.acked(nil, err)
			continue
		}
		waiting = append(waiting, pending{i: i, out: out, f: f})
	}
	for _, p := range waiting {
		var ack *jetstream.PubAck
		var err error
		select {
		case ack = <-p.f.Ok():
		case err = <-p.f.Err():
		case <-ctx.Done():
			err = fmt.Errorf("no ack: %w", ctx.Err())
		}
		results[p.i].Submitted, results[p.i].Err = p.out.acked(ack, err)
	}
	return results
}
