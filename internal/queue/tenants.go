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

// Pair is a queue and a tenant: the unit the fleet keeps a consumer for.
type Pair struct{ Queue, Tenant string }

// Metadata keys of a tenant consumer.
const (
	metaQueue  = "runfleet.queue"
	metaTenant = "runfleet.tenant"
	// metaHistory holds a time before which the consumer's messages may have been served by an
	// earlier consumer: it was made while its queue's discovery consumer replayed history.
	metaHistory = "runfleet.history_until"
)

// TenantConsumer opens the consumer of p's jobs, creating it when it is missing. A new one
// delivers from stream sequence start on: the first message its queue's discovery consumer has
// not yet seen through (see [Discovery]), so that it neither misses the job that made it nor
// replays what the stream kept of the tenant's past. When history is not zero, the messages
// stored before it count as possibly served ([Source.History]).
func TenantConsumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, start uint64, history time.Time, o ConsumerOptions) (*Source, error) {
	if !job.ValidQueue(p.Queue) || !job.ValidTenant(p.Tenant) {
		return nil, fmt.Errorf("queue %q tenant %q: %w", p.Queue, p.Tenant, job.ErrInvalidJobSubject)
	}
	cfg := tenantConfig(s, p, o)
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	if !history.IsZero() {
		cfg.Metadata[metaHistory] = history.UTC().Format(time.RFC3339Nano)
	}
	c, err := js.CreateConsumer(ctx, s.JobsStream(), cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return OpenTenantConsumer(ctx, js, s, p, o)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	return tenantSource(c), nil
}

// OpenTenantConsumer opens the existing consumer of p's jobs; the error wraps
// jetstream.ErrConsumerNotFound when there is none. Its AckWait is raised to o's, as [Consumer]
// does.
func OpenTenantConsumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, o ConsumerOptions) (*Source, error) {
	name := s.TenantConsumer(p.Queue, p.Tenant)
	c, err := js.Consumer(ctx, s.JobsStream(), name)
	if err == nil && c.CachedInfo().Config.AckWait < cmp.Or(o.AckWait, 30*time.Second) {
		cur := c.CachedInfo().Config
		cur.AckWait = cmp.Or(o.AckWait, 30*time.Second)
		c, err = js.UpdateConsumer(ctx, s.JobsStream(), cur)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	return tenantSource(c), nil
}

func tenantConfig(s job.Subjects, p Pair, o ConsumerOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.TenantConsumer(p.Queue, p.Tenant),
		Description:   "runfleet workers of queue " + p.Queue + ", tenant " + p.Tenant,
		FilterSubject: s.TenantJobs(p.Queue, p.Tenant),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cmp.Or(o.AckWait, 30*time.Second),
		MaxDeliver:    -1,
		MaxAckPending: cmp.Or(o.MaxAckPending, 10000),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      map[string]string{metaQueue: p.Queue, metaTenant: p.Tenant},
	}
}

func tenantSource(c jetstream.Consumer) *Source {
	src := &Source{Consumer: c}
	if t, err := time.Parse(time.RFC3339Nano, c.CachedInfo().Config.Metadata[metaHistory]); err == nil {
		src.remade = t
	}
	return src
}

// Discovery returns queue's discovery consumer, creating it when it is missing: it delivers the
// headers of every job stored on the queue, once to one worker of the fleet, which makes the
// job's tenant consumer if there is none and then acks. A job is acked there only once its
// tenant consumer exists, so the discovery consumer's ack floor is a point before which every
// job has a tenant consumer that covers it: a new tenant consumer starts after that floor
// ([Discovery.Floor]).
//
// It is made once per queue and marked as [Consumer] marks its consumer: one made again
// (deleted by an operator, lost with a cluster) replays the stream's history, and the tenant
// consumers it makes then carry the time it was made, before which their jobs may have run.
func Discovery(ctx context.Context, js jetstream.JetStream, s job.Subjects, queue string) (*Source, error) {
	if !job.ValidQueue(queue) {
		return nil, fmt.Errorf("queue %q: %w", queue, job.ErrInvalidQueue)
	}
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	meta := st.CachedInfo().Config.Metadata
	_, served := meta[markerKey(s.Consumer(queue))]
	_, had := meta[markerKey(s.Discovery(queue))]
	src, err := durable(ctx, js, s.JobsStream(), jetstream.ConsumerConfig{
		Durable:       s.Discovery(queue),
		Description:   "runfleet tenant discovery of queue " + queue + ": job headers only",
		FilterSubject: s.QueueJobs(queue),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 10000,
		HeadersOnly:   true,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err == nil && served && !had {
		// The queue was served by a version that kept one consumer per queue: what the stream
		// holds from before now may have run.
		src.remade = src.CachedInfo().Created
	}
	return src, err
}

// Floor returns the stream sequence a tenant consumer made now must start at: one past the
// discovery consumer's ack floor.
func (s *Source) Floor(ctx context.Context) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer %s: %w", s.CachedInfo().Name, err)
	}
	return info.AckFloor.Stream + 1, nil
}

// Remade is when the consumer was made, if it replaced an earlier one; zero otherwise.
func (s *Source) Remade() time.Time { return s.remade }

// Backlog is what a tenant consumer holds now.
type Backlog struct {
	Pending    uint64 // stored and not yet delivered: waiting
	AckPending int    // delivered and not yet acked: claimed or running
	Delivered  uint64 // the last stream sequence the consumer delivered: what waits comes after it
}

// Tenants lists the fleet's tenant consumers and their backlogs: one request per 256 of them,
// whatever their backlogs hold.
func Tenants(ctx context.Context, js jetstream.JetStream, s job.Subjects) (map[Pair]Backlog, error) {
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	out := map[Pair]Backlog{}
	list := st.ListConsumers(ctx)
	for info := range list.Info() {
		q, t := info.Config.Metadata[metaQueue], info.Config.Metadata[metaTenant]
		if q == "" || t == "" {
			continue
		}
		out[Pair{q, t}] = Backlog{Pending: info.NumPending, AckPending: info.NumAckPending, Delivered: info.Delivered.Stream}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", s.JobsStream(), err)
	}
	return out, nil
}

// OldestWaiting returns when the oldest job waiting in p's tenant consumer, whose backlog is b,
// was stored in jobs (the jobs stream): one get of the first message of p's subjects after
// b.Delivered, at a cost that does not grow with the backlog. It returns the zero time when
// nothing waits.
func OldestWaiting(ctx context.Context, jobs jetstream.Stream, s job.Subjects, p Pair, b Backlog) (time.Time, error) {
	if b.Pending == 0 {
		return time.Time{}, nil
	}
	m, err := jobs.GetMsg(ctx, b.Delivered+1, jetstream.WithGetMsgSubject(s.TenantJobs(p.Queue, p.Tenant)))
	if errors.Is(err, jetstream.ErrMsgNotFound) { // started meanwhile
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("oldest job of %s/%s: %w", p.Queue, p.Tenant, err)
	}
	return m.Time, nil
}
