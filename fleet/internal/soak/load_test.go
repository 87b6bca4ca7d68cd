package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/job/jobtest"
)

const (
	hostileTenant = "mallory"
	// hostileMaxQueued is the hostile tenant's max_queued: its floods go past it.
	hostileMaxQueued = 8
	// goodOpen and hostileOpen bound each tenant's jobs submitted and not yet seen settled, so
	// that the backlog follows what the fleet can run instead of growing with the run.
	goodOpen    = 8
	hostileOpen = 40
	// hostileRounds is the hostile tenant's rounds per second.
	hostileRounds = 4
)

var goodTenants = []string{"alice", "bob"}

// expect is what one submitted message must settle as.
type expect struct {
	tenant string
	kind   string     // what was sent: job, flood, flood past the check, status header, bad body
	reason job.Reason // the rejection's reason; "" for a job that runs
}

// load submits the tenants' messages and follows their settlements as they are stored (a
// subscription to the settled subjects), to pace the submitters; what the test checks at the end
// is read from the results stream.
type load struct {
	s    *stack
	msgs chan *nats.Msg // settlements as they are stored

	mu      sync.Mutex
	wake    chan struct{} // closed and replaced when a settlement is seen
	expects map[string]expect
	seen    map[string]bool
	open    map[string]int // per tenant: submitted and not yet seen settled
	refused int            // floods the client refused for max_queued
}

// newLoad subscribes to the settled subjects; the caller unsubscribes when the run is over.
func newLoad(s *stack) (*load, *nats.Subscription, error) {
	l := &load{s: s, msgs: make(chan *nats.Msg, 4096), wake: make(chan struct{}), expects: map[string]expect{}, seen: map[string]bool{}, open: map[string]int{}}
	sub, err := s.js.Conn().ChanSubscribe(s.subjects.Settled("*", "*"), l.msgs)
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to settlements: %w", err)
	}
	return l, sub, nil
}

// follow counts settlements as they are stored until ctx ends.
func (l *load) follow(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-l.msgs:
			id := settledID(l.s.subjects, m.Subject)
			l.mu.Lock()
			if e, ok := l.expects[id]; ok && !l.seen[id] {
				l.seen[id] = true
				l.open[e.tenant]--
				close(l.wake)
				l.wake = make(chan struct{})
			}
			l.mu.Unlock()
		}
	}
}

// room waits until tenant has fewer than limit jobs open; false when ctx ended first.
func (l *load) room(ctx context.Context, tenant string, limit int) bool {
	for {
		l.mu.Lock()
		open, wake := l.open[tenant], l.wake
		l.mu.Unlock()
		if open < limit {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		}
	}
}

// expecting records id before it is published, so that its settlement is never seen first.
func (l *load) expecting(id string, e expect) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expects[id] = e
	l.open[e.tenant]++
}

// unexpect forgets id, which was refused and stored nothing.
func (l *load) unexpect(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.expects[id]; ok {
		delete(l.expects, id)
		l.open[e.tenant]--
	}
}

// submitted is a copy of what was submitted.
func (l *load) submitted() map[string]expect {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]expect, len(l.expects))
	for id, e := range l.expects {
		out[id] = e
	}
	return out
}

// retries is how often a publish that failed is tried again under the same id (the stream's
// duplicate window keeps one): a publish may time out on a loaded machine.
const retries = 5

// submit stores req as id for tenant through the client, with its max_queued check. It returns
// runfleet.ErrQueueFull, and nothing is expected of id, when the check refused it.
func (l *load) submit(ctx context.Context, tenant, id, kind string, req job.Request) error {
	req.ID = id
	l.expecting(id, expect{tenant: tenant, kind: kind})
	var err error
	for range retries {
		if _, err = l.s.client.Submit(ctx, "", req, &runfleet.SubmitOptions{Tenant: tenant}); err == nil || ctx.Err() != nil {
			break
		}
		if errors.Is(err, runfleet.ErrQueueFull) {
			l.unexpect(id)
			return err
		}
	}
	if err != nil && ctx.Err() != nil {
		// Maybe stored, maybe not: the run is over; it is checked only if it settled.
		l.unexpect(id)
		return nil
	}
	return err
}

// publish stores a message as a publisher that skips the client would: any header, any body.
func (l *load) publish(ctx context.Context, tenant, id string, e expect, h nats.Header, body []byte) error {
	m := &nats.Msg{Subject: l.s.subjects.Job(job.DefaultQueue, tenant, id), Header: nats.Header{}, Data: body}
	for k, v := range h {
		m.Header[k] = v
	}
	m.Header.Set(job.HeaderMsgID, id)
	l.expecting(id, e)
	var err error
	for range retries {
		if _, err = l.s.js.PublishMsg(ctx, m); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil && ctx.Err() != nil {
		l.unexpect(id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", id, err)
	}
	return nil
}

// good submits short python3 jobs for tenant until ctx ends.
func (l *load) good(ctx context.Context, tenant string) error {
	for n := 0; l.room(ctx, tenant, goodOpen); n++ {
		id := fmt.Sprintf("%s-%d", tenant, n)
		code := fmt.Sprintf("import time; time.sleep(%.2f); print(%q)", rand.Float64()*0.3, id)
		if err := l.submit(ctx, tenant, id, "job", job.Request{Language: "python3", Code: code}); err != nil {
			return fmt.Errorf("tenant %s: %w", tenant, err)
		}
	}
	return nil
}

// statusHeaders are what a server status carries: a client that took a job for one dropped it.
var statusHeaders = []nats.Header{
	{"Status": {"404"}, "Description": {"No Messages"}},
	{"Status": {"100"}},
	{"Status": {"408"}},
	{"Status": {"100"}, "Description": {"Idle Heartbeat"}, "Nats-Last-Consumer": {"0"}},
}

// hostile sends, in rounds until ctx ends: a job with a status header, a body the decoder
// refuses, a flood through the client until its max_queued check refuses, and two jobs more
// published around the check.
func (l *load) hostile(ctx context.Context) error {
	var bad []jobtest.BadInput
	for _, b := range jobtest.BadInputs(job.DefaultPolicy().MaxBodyBytes) {
		if len(b.Body) <= 256<<10 {
			bad = append(bad, b)
		}
	}
	sleepy := func(id string) job.Request {
		return job.Request{Language: "python3", Code: fmt.Sprintf("import time; time.sleep(0.3); print(%q)", id)}
	}
	// Its rejections settle at once: rounds are paced so that its share of the messages stays
	// one a load would see, not whatever a loop can publish.
	tick := time.NewTicker(time.Second / hostileRounds)
	defer tick.Stop()
	for n := 0; l.room(ctx, hostileTenant, hostileOpen); n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id := fmt.Sprintf("%s-status-%d", hostileTenant, n)
		var body []byte
		if n%2 == 1 {
			body = []byte(`{"language":"python3","code":"print('poisoned')"}`)
		}
		e := expect{tenant: hostileTenant, kind: "status header", reason: job.ReasonReservedHeader}
		if err := l.publish(ctx, hostileTenant, id, e, statusHeaders[n%len(statusHeaders)], body); err != nil {
			return err
		}
		b := bad[n%len(bad)]
		id = fmt.Sprintf("%s-bad-%d", hostileTenant, n)
		e = expect{tenant: hostileTenant, kind: "bad body: " + b.Name, reason: b.Reason}
		if err := l.publish(ctx, hostileTenant, id, e, nil, []byte(b.Body)); err != nil {
			return err
		}
		for i := range 2 * hostileMaxQueued {
			id := fmt.Sprintf("%s-flood-%d-%d", hostileTenant, n, i)
			err := l.submit(ctx, hostileTenant, id, "flood", sleepy(id))
			if errors.Is(err, runfleet.ErrQueueFull) {
				l.mu.Lock()
				l.refused++
				l.mu.Unlock()
				break
			}
			if err != nil {
				return fmt.Errorf("tenant %s: %w", hostileTenant, err)
			}
		}
		for i := range 2 {
			id := fmt.Sprintf("%s-past-%d-%d", hostileTenant, n, i)
			body, err := json.Marshal(sleepy(id))
			if err != nil {
				return err
			}
			if err := l.publish(ctx, hostileTenant, id, expect{tenant: hostileTenant, kind: "flood past the check"}, nil, body); err != nil {
				return err
			}
		}
	}
	return nil
}
