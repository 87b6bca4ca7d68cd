package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// ConsumerOptions configure a tenant consumer (protocol.TenantConsumerConfig).
type ConsumerOptions = protocol.ConsumerOptions

// Source is a consumer the worker fetches jobs from.
type Source struct {
	jetstream.Consumer
	// remade is when the consumer was made, if it replaced an earlier one of the same name.
	remade time.Time
}

// Deliveries is the delivery count a claim of the message may trust: JetStream's, or at least 2
// for a message stored before its consumer replaced an earlier one, whose count restarted at 1
// although the earlier consumer may have delivered it (lease.Delivery's "may have run" rule).
func (s *Source) Deliveries(meta *jetstream.MsgMetadata) uint64 {
	if s.History(meta) {
		return max(meta.NumDelivered, 2)
	}
	return meta.NumDelivered
}

// History reports whether the message was stored before its consumer replaced an earlier one:
// it may have been served and settled long ago, and the stream kept it.
func (s *Source) History(meta *jetstream.MsgMetadata) bool {
	return !s.remade.IsZero() && !meta.Timestamp.After(s.remade)
}

// Next waits up to wait for one message of s; nil when none came.
func (s *Source) Next(wait time.Duration) (jetstream.Msg, error) {
	batch, err := s.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		return m, nil
	}
	return nil, batch.Error()
}

// durable creates or opens the durable consumer cfg of the jobs stream and says whether it
// replaced an earlier one: when the consumers bucket's marker of its first making
// ([protocol.FirstMadeKey]) names another time than its own.
func durable(ctx context.Context, js jetstream.JetStream, s job.Subjects, cfg jetstream.ConsumerConfig) (*Source, error) {
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return nil, err
	}
	key := protocol.FirstMadeKey(cfg.Durable)
	first, ok, err := marked(ctx, kv, st, key)
	if err != nil {
		return nil, err
	}
	c, err := createOrOpen(ctx, js, s.JobsStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	created := c.CachedInfo().Created
	// Set after the consumer was made, so that it never names a consumer that does not exist; a
	// worker that dies in between leaves it to the next, which finds the consumer and sets it. A
	// marker found only in the stream's metadata is copied as it is.
	if first, err = mark(ctx, kv, key, cmpTime(ok, first, created)); err != nil {
		return nil, err
	}
	if t, err := time.Parse(time.RFC3339Nano, first); err == nil && t.Equal(created) {
		return &Source{Consumer: c}, nil
	}
	return &Source{Consumer: c, remade: created}, nil
}

// createOrOpen creates the durable consumer cfg of stream, or opens it when it exists, raising
// its AckWait to cfg's. A consumer deleted while it is made again (by a worker that saw it lost)
// makes the server answer a 500 ("consumer closed") or "does not exist" for a moment: tried
// again, a few times. The server may also keep the consumer made again without its directory
// (nats-server's file store): it serves it, and answers every later create of it with a 500
// ("open .../meta.inf.tmp: no such file or directory"); such a consumer is opened, not made.
func createOrOpen(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		c, err := js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) || deletedMeanwhile(err) {
			c, err = js.Consumer(ctx, stream, cfg.Durable)
			if err == nil && c.CachedInfo().Config.AckWait < cfg.AckWait {
				cur := c.CachedInfo().Config
				cur.AckWait = cfg.AckWait
				c, err = js.UpdateConsumer(ctx, stream, cur)
			}
		}
		if err == nil || !deletedMeanwhile(err) || attempt == createAttempts {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (retried until: %w)", err, context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// createAttempts bounds createOrOpen's tries.
const createAttempts = 8

// deletedMeanwhile tells the errors of a consumer made or opened while it was being deleted.
func deletedMeanwhile(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDoesNotExist) ||
		errors.As(err, &apiErr) && apiErr.Code == 500
}

// cmpTime is the time value holds when ok, else at.
func cmpTime(ok bool, value string, at time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, value); ok && err == nil {
		return t
	}
	return at
}
