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

// Pair is a queue and a tenant: the unit the fleet keeps a consumer for.
type Pair struct{ Queue, Tenant string }

// TenantConsumer opens the consumer of p's jobs, creating it when it is missing. A new one
// delivers from stream sequence start on: the first message its queue's discovery consumer has
// not yet seen through (see [Discovery]), so that it neither misses the job that made it nor
// replays what the stream kept of the tenant's past. When history is not zero, the messages
// stored before it count as possibly served ([Source.History]).
//
// A tenant with a job kept before start had a consumer already (discovery acks a job only once
// its tenant consumer exists), lost since with everything it had not delivered: that one is made
// again as [RemakeTenantConsumer] makes it, from the stream's start, and not from start.
func TenantConsumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, start uint64, history time.Time, o ConsumerOptions) (*Source, error) {
	if !job.ValidQueue(p.Queue) || !job.ValidTenant(p.Tenant) {
		return nil, fmt.Errorf("queue %q tenant %q: %w", p.Queue, p.Tenant, job.ErrInvalidJobSubject)
	}
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return nil, err
	}
	_, made, err := marked(ctx, kv, st, protocol.TenantMadeKey(p.Queue, p.Tenant))
	if err != nil {
		return nil, err
	}
	if made {
		return remake(ctx, js, kv, st, s, p, history, o)
	}
	if start > 1 {
		first, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(s.TenantJobs(p.Queue, p.Tenant)))
		switch {
		case err == nil && first.Sequence < start:
			return remake(ctx, js, kv, st, s, p, history, o)
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, fmt.Errorf("first job of %s/%s: %w", p.Queue, p.Tenant, err)
		}
	}
	return makeTenant(ctx, js, kv, s, p, start, history, o)
}

// RemakeTenantConsumer makes again the consumer of p's jobs, which was lost (deleted, or gone with
// its server) with the jobs it had not delivered and those it had not seen acked: the new one
// delivers from the stream's start, and every message stored before it counts as possibly served
// ([Source.History]), so that a kept request runs only when no settlement or record says it ran.
// When the consumer exists (another worker made it again first), it is opened.
func RemakeTenantConsumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, o ConsumerOptions) (*Source, error) {
	if !job.ValidQueue(p.Queue) || !job.ValidTenant(p.Tenant) {
		return nil, fmt.Errorf("queue %q tenant %q: %w", p.Queue, p.Tenant, job.ErrInvalidJobSubject)
	}
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return nil, err
	}
	return remake(ctx, js, kv, st, s, p, time.Time{}, o)
}

// remake makes p's consumer to deliver from the stream's start, its history reaching at least to
// the last message st held when it was read: the old consumer was gone by then, so that nothing
// it delivered was stored later. The time is the server's, as the messages' are.
func remake(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, st jetstream.Stream, s job.Subjects, p Pair, history time.Time, o ConsumerOptions) (*Source, error) {
	if last := st.CachedInfo().State.LastTime; last.After(history) {
		history = last
	}
	return makeTenant(ctx, js, kv, s, p, 1, history, o)
}

// makeTenant makes p's consumer, or opens it when it exists, and marks the pair made.
func makeTenant(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, s job.Subjects, p Pair, start uint64, history time.Time, o ConsumerOptions) (*Source, error) {
	cfg := protocol.TenantConsumerConfig(s, p.Queue, p.Tenant, o)
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	if !history.IsZero() {
		cfg.Metadata[protocol.MetadataHistoryUntil] = history.UTC().Format(time.RFC3339Nano)
	}
	var src *Source
	c, err := js.CreateConsumer(ctx, s.JobsStream(), cfg)
	switch {
	case errors.Is(err, jetstream.ErrConsumerExists) || deletedMeanwhile(err): // see createOrOpen
		if src, err = OpenTenantConsumer(ctx, js, s, p, o); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	default:
		src = tenantSource(c)
	}
	if _, err := mark(ctx, kv, protocol.TenantMadeKey(p.Queue, p.Tenant), src.CachedInfo().Created); err != nil {
		return nil, err
	}
	return src, nil
}

// OpenTenantConsumer opens the existing consumer of p's jobs; the error wraps
// jetstream.ErrConsumerNotFound when there is none. Its AckWait is raised to o's, as [Consumer]
// does.
func OpenTenantConsumer(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, o ConsumerOptions) (*Source, error) {
	want := protocol.TenantConsumerConfig(s, p.Queue, p.Tenant, o)
	name := want.Durable
	c, err := js.Consumer(ctx, s.JobsStream(), name)
	if err == nil && c.CachedInfo().Config.AckWait < want.AckWait {
		cur := c.CachedInfo().Config
		cur.AckWait = want.AckWait
		c, err = js.UpdateConsumer(ctx, s.JobsStream(), cur)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	return tenantSource(c), nil
}

func tenantSource(c jetstream.Consumer) *Source {
	src := &Source{Consumer: c}
	if t, err := time.Parse(time.RFC3339Nano, c.CachedInfo().Config.Metadata[protocol.MetadataHistoryUntil]); err == nil {
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
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return nil, err
	}
	_, served, err := marked(ctx, kv, st, protocol.FirstMadeKey(s.Consumer(queue)))
	if err != nil {
		return nil, err
	}
	_, had, err := marked(ctx, kv, st, protocol.FirstMadeKey(s.Discovery(queue)))
	if err != nil {
		return nil, err
	}
	src, err := durable(ctx, js, s, protocol.DiscoveryConsumerConfig(s, queue))
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
	// Created is when the consumer was made: a worker whose handle says otherwise holds one that
	// was lost and made again.
	Created time.Time
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
		q, t := info.Config.Metadata[protocol.MetadataQueue], info.Config.Metadata[protocol.MetadataTenant]
		if q == "" || t == "" {
			continue
		}
		out[Pair{q, t}] = Backlog{Pending: info.NumPending, AckPending: info.NumAckPending, Delivered: info.Delivered.Stream, Created: info.Created}
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
