package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// ConsumerOptions configure the durable consumer of a queue. Zero fields take the defaults named.
type ConsumerOptions struct {
	// AckWait is how long a delivery may go without an ack or in-progress signal before JetStream
	// redelivers it; default 30 s. Workers signal progress well inside it.
	AckWait time.Duration
	// MaxAckPending bounds the deliveries outstanding across the fleet; default 10000.
	MaxAckPending int
}

// Consumer returns the durable pull consumer that the fleet shares for queue, creating it when it
// is missing. An existing consumer whose AckWait is shorter than o's (made by a worker with a
// shorter lease) is raised to it, so that this worker's deliveries are not redelivered while it
// runs them; it is never lowered, since other workers of the fleet may need it. MaxDeliver stays unlimited: in a work-queue stream a message past MaxDeliver would
// stay stored forever and block nothing but be never settled; the lease record counts failures
// instead.
func Consumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, queue string, o ConsumerOptions) (jetstream.Consumer, error) {
	if !job.ValidQueue(queue) {
		return nil, fmt.Errorf("queue %q: want %s", queue, "^[a-z0-9][a-z0-9_-]{0,63}$")
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       s.Consumer(queue),
		Description:   "runfleet workers of queue " + queue + ", every tenant",
		FilterSubject: s.QueueJobs(queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cmp.Or(o.AckWait, 30*time.Second),
		MaxDeliver:    -1,
		MaxAckPending: cmp.Or(o.MaxAckPending, 10000),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	c, err := js.CreateConsumer(ctx, s.JobsStream(), cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		c, err = js.Consumer(ctx, s.JobsStream(), cfg.Durable)
		if err == nil && c.CachedInfo().Config.AckWait < cfg.AckWait {
			cur := c.CachedInfo().Config
			cur.AckWait = cfg.AckWait
			c, err = js.UpdateConsumer(ctx, s.JobsStream(), cur)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	return c, nil
}
