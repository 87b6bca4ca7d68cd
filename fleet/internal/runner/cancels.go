package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// jobKey is a job: its tenant and its id.
type jobKey struct{ tenant, id string }

// cancels holds the cancel functions of the deliveries this worker runs, by job. A job may be
// delivered to the same worker twice at once (a redelivery while the first delivery still runs):
// each delivery has its own entry, and a cancel reaches both.
type cancels struct {
	mu   sync.Mutex
	byID map[jobKey]map[*attempt]context.CancelCauseFunc
	n    int
}

func (c *cancels) add(a *attempt, cancel context.CancelCauseFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[jobKey]map[*attempt]context.CancelCauseFunc{}
	}
	k := jobKey{a.tenant, a.id}
	if c.byID[k] == nil {
		c.byID[k] = map[*attempt]context.CancelCauseFunc{}
	}
	c.byID[k][a] = cancel
	c.n++
}

func (c *cancels) remove(a *attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := jobKey{a.tenant, a.id}
	if _, ok := c.byID[k][a]; !ok {
		return
	}
	delete(c.byID[k], a)
	if len(c.byID[k]) == 0 {
		delete(c.byID, k)
	}
	c.n--
}

// cancel ends with cause every delivery of tenant's job id whose message was stored by at, when the
// cancel was: a cancel stored before the job it names was for no job (see
// [queue.Results.Cancelled]).
func (c *cancels) cancel(tenant, id string, at time.Time, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, f := range c.byID[jobKey{tenant, id}] {
		if !at.Before(a.meta.Timestamp) {
			f(cause)
		}
	}
}

func (c *cancels) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// watchCancels follows the control stream from its current end and cancels the running jobs it
// names. It reads through a JetStream ordered consumer, which resumes after the last message it
// saw when the connection comes back: a cancel published while this worker was reconnecting
// still arrives. Cancels stored before the watch began are checked per job before dispatch
// ([queue.Results.Cancelled]). The returned function stops the watch and waits for it.
func (r *Runner) watchCancels(ctx context.Context) (stop func(), err error) {
	s, err := r.js.Stream(ctx, r.subjects.ControlStream())
	if err != nil {
		return nil, fmt.Errorf("control stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("control stream: %w", err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subjects.AllCancels()},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("watch cancels: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		tenant, id, ok := r.subjects.ParseCancel(m.Subject())
		if !ok {
			return // a version-2 cancel names no tenant: it cancels nothing
		}
		at := time.Now() // a message without metadata is a cancel stored now
		if meta, err := m.Metadata(); err == nil {
			at = meta.Timestamp
		}
		r.cancels.cancel(tenant, id, at, errCancelled)
	})
	if err != nil {
		return nil, fmt.Errorf("watch cancels: %w", err)
	}
	return func() {
		cc.Stop()
		<-cc.Closed()
	}, nil
}
