package runner

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/job"
)

// sweepEvery is how often a worker lists the tenant consumers: to learn of those other workers
// made, and of jobs waiting that no republish announced (a redelivery, a worker that was
// disconnected when a job came).
const sweepEvery = 5 * time.Second

// tenants keeps a worker's scheduler supplied with the fleet's tenant consumers.
type tenants struct {
	r       *Runner
	sched   *fairshare.Scheduler
	queues  map[string]*queue.Source // discovery consumers, by queue
	unknown chan queue.Pair          // announced pairs the scheduler does not know
	// madeRead: a sweep read which pairs of the worker's queues had a consumer (queue.Made),
	// made again those whose consumer is missing and marked those that were not marked.
	madeRead bool
}

func (r *Runner) consumerOptions() queue.ConsumerOptions {
	return queue.ConsumerOptions{AckWait: 3 * r.leases.TTL()}
}

// newTenants opens each queue's discovery consumer.
func (r *Runner) newTenants(ctx context.Context, sched *fairshare.Scheduler) (*tenants, error) {
	t := &tenants{r: r, sched: sched, queues: map[string]*queue.Source{}, unknown: make(chan queue.Pair, 1024)}
	for _, q := range r.o.Queues {
		d, err := queue.Discovery(ctx, r.js, r.subjects, q)
		if err != nil {
			return nil, err
		}
		t.queues[q] = d
	}
	return t, nil
}

// listen subscribes to the jobs stream's republish of the queues' job headers: each names a
// pair that has a job waiting. It returns the subscriptions' stop.
func (t *tenants) listen() (func(), error) {
	var subs []*nats.Subscription
	stop := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for q := range t.queues {
		s, err := t.r.nc.Subscribe(t.r.subjects.Arrived(q, "*"), func(m *nats.Msg) {
			parts := strings.Split(m.Subject, ".")
			if len(parts) < 3 {
				return
			}
			p := queue.Pair{Queue: parts[len(parts)-3], Tenant: parts[len(parts)-2]}
			seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if t.sched.Arrived(p, seq) || !job.ValidTenant(p.Tenant) {
				return
			}
			select {
			case t.unknown <- p:
			default: // the next sweep finds it
			}
		})
		if err != nil {
			stop()
			return nil, err
		}
		subs = append(subs, s)
	}
	return stop, nil
}

// upkeep opens the consumers of announced pairs and sweeps every sweepEvery until ctx ends.
func (t *tenants) upkeep(ctx context.Context) {
	t.sweep(ctx)
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	// tried bounds the opens of a pair whose consumer the discovery consumer has not made yet: a
	// new tenant's flood announces it once per job.
	tried := map[queue.Pair]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-t.unknown:
			if t.sched.Known(p) || time.Since(tried[p]) < time.Second {
				continue
			}
			tried[p] = time.Now()
			// The discovery consumer makes a missing one; an existing one is opened here.
			src, err := queue.OpenTenantConsumer(ctx, t.r.js, t.r.subjects, p, t.r.consumerOptions())
			if err == nil {
				t.sched.Add(p, src)
			} else if !errors.Is(err, jetstream.ErrConsumerNotFound) && ctx.Err() == nil {
				t.r.log.Warn("open tenant consumer", "queue", p.Queue, "tenant", p.Tenant, "err", err)
			}
		case <-tick.C:
			clear(tried)
			t.sweep(ctx)
		}
	}
}

// sweep lists the tenant consumers: it adds those of this worker's queues it did not know, and
// marks active those with jobs pending or unacked (a redelivery comes back without a republish).
// A consumer it knows that the listing lacks was lost, and is made again (lost); one made since
// this worker opened it replaces its handle.
func (t *tenants) sweep(ctx context.Context) {
	backlogs, err := queue.Tenants(ctx, t.r.js, t.r.subjects)
	if err != nil {
		if ctx.Err() == nil {
			t.r.log.Warn("list tenant consumers", "err", err)
		}
		return
	}
	queued := map[string]uint64{}
	for p, b := range backlogs {
		if _, ok := t.queues[p.Queue]; !ok {
			continue
		}
		queued[p.Tenant] += b.Pending
		if src := t.sched.Source(p); src == nil || !src.CachedInfo().Created.Equal(b.Created) {
			src, err := queue.OpenTenantConsumer(ctx, t.r.js, t.r.subjects, p, t.r.consumerOptions())
			if err != nil {
				if ctx.Err() == nil {
					t.r.log.Warn("open tenant consumer", "queue", p.Queue, "tenant", p.Tenant, "err", err)
				}
				continue
			}
			if !t.sched.Add(p, src) {
				t.sched.Replace(p, src)
			}
		}
		if b.Pending > 0 || b.AckPending > 0 {
			t.sched.Arrived(p, 0)
		}
	}
	for _, p := range t.sched.Pairs() {
		if _, listed := backlogs[p]; !listed {
			t.lost(ctx, p)
		}
	}
	if !t.madeRead {
		t.madeRead = t.loadMade(ctx, backlogs)
	}
	t.r.o.Observer.Queued(queued)
}

// loadMade reads which pairs of the worker's queues had a consumer, once: those the listing
// lacks were lost while no worker watched them (the scheduler learns of them here, and the sweep
// makes them again); those it lists and that are not marked (made by an earlier version) are
// marked. It reports whether it read them.
func (t *tenants) loadMade(ctx context.Context, backlogs map[queue.Pair]queue.Backlog) bool {
	made := map[queue.Pair]bool{}
	for q := range t.queues {
		pairs, err := queue.Made(ctx, t.r.js, t.r.subjects, q)
		if err != nil {
			if ctx.Err() == nil {
				t.r.log.Warn("list tenants made", "queue", q, "err", err)
			}
			return false
		}
		for _, p := range pairs {
			made[p] = true
		}
	}
	for p, b := range backlogs {
		if _, ok := t.queues[p.Queue]; ok && !made[p] {
			if err := queue.MarkMade(ctx, t.r.js, t.r.subjects, p, b.Created); err != nil {
				t.r.log.Warn("mark tenant consumer", "queue", p.Queue, "tenant", p.Tenant, "err", err)
				return false
			}
			made[p] = true
		}
	}
	for p := range made {
		if _, listed := backlogs[p]; !listed && !t.sched.Known(p) {
			t.lost(ctx, p)
		}
	}
	return true
}

// lost makes again p's consumer, which the scheduler knows and the listing lacks: deleted, or
// gone with its server, and with it every job it held and had not seen acked. The new one
// delivers from the stream's start (queue.RemakeTenantConsumer); what ran or runs is settled or
// held, and acked or left, by the claim (the settlement read, the record, the dispatch gate).
func (t *tenants) lost(ctx context.Context, p queue.Pair) {
	src, err := queue.OpenTenantConsumer(ctx, t.r.js, t.r.subjects, p, t.r.consumerOptions())
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.r.log.Warn("tenant consumer lost; making it again from the stream's start", "queue", p.Queue, "tenant", p.Tenant)
		src, err = queue.RemakeTenantConsumer(ctx, t.r.js, t.r.subjects, p, t.r.consumerOptions())
	}
	if err != nil {
		if ctx.Err() == nil {
			t.r.log.Warn("make tenant consumer again", "queue", p.Queue, "tenant", p.Tenant, "err", err)
		}
		return
	}
	if !t.sched.Add(p, src) {
		t.sched.Replace(p, src)
	}
}

// discover reads queue q's discovery consumer until ctx ends: for each job stored on q it makes
// sure the job's tenant consumer exists before it acks, so that the discovery consumer's ack
// floor is where a new tenant consumer may start (queue.Discovery). A job whose subject names no
// valid tenant has no consumer to go to: it is rejected here.
//
// It pulls through the Puller, never jetstream's Fetch: the consumer delivers headers only, so every
// job comes with an empty body, and jetstream reads one with a Status header as a server status
// (ending the batch, or never acking it).
func (t *tenants) discover(ctx context.Context, q string, puller *queue.Puller) {
	d := t.queues[q]
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		var notMade error
		err := puller.Fetch(ctx, d, 256, time.Second, func(m jetstream.Msg) {
			if !t.discovered(ctx, q, d, m) {
				notMade = errors.New("tenant consumer not made")
			}
		})
		if err == nil || errors.Is(err, nats.ErrTimeout) {
			err = notMade
		} else if ctx.Err() == nil {
			// A fetch that fails may have lost the consumer (deleted, gone with its server: no
			// responders): it is opened, or made again replaying the stream's history.
			d = t.rediscover(ctx, q, d)
		}
		if err == nil {
			backoff = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		t.r.log.Warn("discover tenants", "queue", q, "err", err)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
		case <-ctx.Done():
			return
		}
	}
}

// rediscover opens q's discovery consumer again, making it when it is missing, and returns it
// in place of d when it is not d's.
func (t *tenants) rediscover(ctx context.Context, q string, d *queue.Source) *queue.Source {
	nd, err := queue.Discovery(ctx, t.r.js, t.r.subjects, q)
	if err != nil {
		if ctx.Err() == nil {
			t.r.log.Warn("open discovery consumer", "queue", q, "err", err)
		}
		return d
	}
	if nd.CachedInfo().Created.Equal(d.CachedInfo().Created) {
		return d
	}
	t.r.log.Warn("discovery consumer lost and made again; replaying the queue's history", "queue", q, "remade", nd.Remade())
	return nd
}

// discovered handles one discovery message and reports whether it was acked.
func (t *tenants) discovered(ctx context.Context, q string, d *queue.Source, m jetstream.Msg) bool {
	_, tenant, _, err := t.r.subjects.ParseJob(m.Subject())
	if err != nil {
		meta, merr := m.Metadata()
		if merr != nil || !errors.Is(err, job.ErrInvalidTenant) {
			// A job id the subject cannot name reaches its tenant consumer, whose worker rejects
			// it (queue.ParseJob); only a tenant that cannot have a consumer is this one's.
			_ = m.Ack()
			return true
		}
		t.r.reject(ctx, q, m, meta, job.Rejection{Subject: m.Subject(), Reason: job.ReasonInvalidSubject, Detail: err.Error()})
		return true
	}
	p := queue.Pair{Queue: q, Tenant: tenant}
	if !t.sched.Known(p) {
		src, err := t.ensure(ctx, d, p)
		if err != nil {
			if ctx.Err() == nil {
				t.r.log.Warn("make tenant consumer", "queue", q, "tenant", tenant, "err", err)
			}
			_ = m.NakWithDelay(time.Second)
			return false
		}
		t.sched.Add(p, src)
	}
	var seq uint64
	if meta, err := m.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	t.sched.Arrived(p, seq)
	_ = m.Ack()
	return true
}

// ensure opens p's consumer, or makes it to start at the discovery consumer's floor.
func (t *tenants) ensure(ctx context.Context, d *queue.Source, p queue.Pair) (*queue.Source, error) {
	src, err := queue.OpenTenantConsumer(ctx, t.r.js, t.r.subjects, p, t.r.consumerOptions())
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return src, err
	}
	floor, err := d.Floor(ctx)
	if err != nil {
		return nil, err
	}
	return queue.TenantConsumer(ctx, t.r.js, t.r.subjects, p, floor, d.Remade(), t.r.consumerOptions())
}
