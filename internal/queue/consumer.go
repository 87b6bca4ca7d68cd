package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerOptions configure the durable consumer of a queue. Zero fields take the defaults named.
type ConsumerOptions struct {
	// AckWait is how long a delivery may go without an ack or in-progress signal before JetStream
	// redelivers it; default 30 s. Workers signal progress well inside it.
	AckWait time.Duration
	// MaxAckPending bounds the deliveries outstanding across the fleet; default 10000.
	MaxAckPending int
}

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
// replaced an earlier one.
func durable(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (*Source, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	first, marked := st.CachedInfo().Config.Metadata[markerKey(cfg.Durable)]
	c, err := js.CreateConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		c, err = js.Consumer(ctx, stream, cfg.Durable)
		if err == nil && c.CachedInfo().Config.AckWait < cfg.AckWait {
			cur := c.CachedInfo().Config
			cur.AckWait = cfg.AckWait
			c, err = js.UpdateConsumer(ctx, stream, cur)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	created := c.CachedInfo().Created
	if !marked {
		if err := mark(ctx, js, st, cfg.Durable, created); err != nil {
			return nil, err
		}
		return &Source{Consumer: c}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, first); err == nil && t.Equal(created) {
		return &Source{Consumer: c}, nil
	}
	return &Source{Consumer: c, remade: created}, nil
}

// markerKey is the jobs stream's metadata key that holds when consumer name was first made.
func markerKey(name string) string { return "runfleet.first_made." + name }

// mark records on stream st that consumer name was first made at created. It is written after
// the consumer was made, so that it never names a consumer that does not exist; a worker that
// dies in between leaves it to the next, which finds the consumer and writes it.
func mark(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, name string, created time.Time) error {
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", st.CachedInfo().Config.Name, err)
	}
	cfg := info.Config
	if _, ok := cfg.Metadata[markerKey(name)]; ok {
		return nil
	}
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	cfg.Metadata[markerKey(name)] = created.UTC().Format(time.RFC3339Nano)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("mark consumer %s on stream %s: %w", name, cfg.Name, err)
	}
	return nil
}
