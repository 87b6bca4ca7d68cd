package runfleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/protocol"
)

// Direct gets (protocol.DirectGetRequest) read a stream without its API's request queue and hold
// nothing on the server.

func (c *Client) directSubject(stream string) string {
	return protocol.DirectGetSubject(c.js, stream)
}

// lastMsg returns the last message stored on subject, which may hold wildcards: then the
// server walks the distinct subjects they match, never the messages. It returns
// protocol.ErrNoMessage when there is none. The subject is named in the request's own subject
// (no body), so that a NATS user can be allowed its tenant's subjects only.
func (c *Client) lastMsg(ctx context.Context, stream, subject string) (protocol.StoredMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	m, err := c.js.Conn().RequestWithContext(rctx, c.directSubject(stream)+"."+subject, nil)
	if err != nil {
		return protocol.StoredMsg{}, withCtx(ctx, fmt.Errorf("direct get %s: %w", subject, err))
	}
	return protocol.ParseDirectGet(m)
}

// directBatch is how many messages one batched direct get asks for.
const directBatch = 256

// scan calls each for every message stored on subject (wildcards allowed) from sequence from
// on, in order, and returns the last sequence it saw (from-1 when none). Each request asks for a
// batch and the answer ends with a 204 end-of-batch status, which says how many are left.
func (c *Client) scan(ctx context.Context, stream, subject string, from uint64, each func(protocol.StoredMsg) error) (uint64, error) {
	nc := c.js.Conn()
	last := from - 1
	// One answer is at most a batch and its end-of-batch status: the channel never drops.
	msgs := make(chan *nats.Msg, directBatch+1)
	sub, err := nc.ChanSubscribe(nc.NewRespInbox(), msgs)
	if err != nil {
		return last, fmt.Errorf("direct get %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	for {
		pending, err := c.scanBatch(ctx, sub.Subject, msgs, stream, subject, last+1, &last, each)
		if err != nil || pending == 0 {
			return last, err
		}
	}
}

// scanBatch makes one batched request answered to inbox and returns how many messages the
// server says are left after it.
func (c *Client) scanBatch(ctx context.Context, inbox string, msgs <-chan *nats.Msg, stream, subject string, from uint64, last *uint64, each func(protocol.StoredMsg) error) (uint64, error) {
	body, _ := json.Marshal(protocol.DirectGetRequest{Seq: from, NextFor: subject, Batch: directBatch})
	if err := c.js.Conn().PublishRequest(c.directSubject(stream), inbox, body); err != nil {
		return 0, fmt.Errorf("direct get %s: %w", subject, err)
	}
	timeout := time.NewTimer(c.requestTimeout())
	defer timeout.Stop()
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return 0, withCtx(ctx, fmt.Errorf("direct get %s: %w", subject, ctx.Err()))
		case <-timeout.C:
			return 0, fmt.Errorf("direct get %s: %w", subject, nats.ErrTimeout)
		case m = <-msgs:
		}
		switch m.Header.Get("Status") {
		case "204": // end of batch
			n, _ := strconv.ParseUint(m.Header.Get(protocol.HeaderNumPending), 10, 64)
			return n, nil
		case "404":
			return 0, nil
		}
		sm, err := protocol.ParseDirectGet(m)
		if err != nil {
			return 0, err
		}
		*last = sm.Sequence
		if err := each(sm); err != nil {
			return 0, err
		}
	}
}

// requestTimeout bounds a wait for the server when ctx has no deadline, as the JetStream API's
// own requests are bounded.
func (c *Client) requestTimeout() time.Duration {
	return cmp.Or(c.js.Options().DefaultTimeout, 5*time.Second)
}
