package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/protocol"
)

// Admission's two fleet-wide checks besides max_queued (docs/protocol.md, "Declared queues" and
// "Tenants"): a job on a queue the fleet does not declare for its tenant is 404 unknown_queue, and
// one of a tenant past a storage bound is 429 tenant_storage_full, both before anything is stored.

// servedTTL is how long the gateway trusts what it learnt of whether a queue is served, for a fleet
// that declares no queues; servedMax bounds how many queues it remembers, so that requests naming
// new queues cannot grow the gateway.
const (
	servedTTL = 5 * time.Second
	servedMax = 1024
)

// served remembers which queues have a discovery consumer: a worker serves, or served, them.
type served struct {
	mu     sync.Mutex
	queues map[string]servedAt
}

type servedAt struct {
	ok bool
	at time.Time
}

// queueAllowed reports, as an error wrapping protocol.ErrUnknownQueue, whether tenant may store a
// job on queue. A fleet without declarations serves a queue that has a discovery consumer; when
// that cannot be read the job is admitted (the workers that serve a queue have made it).
func (g *Gateway) queueAllowed(ctx context.Context, queue, tenant string) error {
	return g.tenants.QueueAllowed(queue, tenant, func(queue string) bool { return g.isServed(ctx, queue) })
}

func (g *Gateway) isServed(ctx context.Context, queue string) bool {
	s := &g.served
	s.mu.Lock()
	if e, ok := s.queues[queue]; ok && time.Since(e.at) < servedTTL {
		s.mu.Unlock()
		return e.ok
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, backlogReadTimeout)
	defer cancel()
	_, err := g.js.Consumer(ctx, g.subjects.JobsStream(), g.subjects.Discovery(queue))
	ok := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		g.log.Warn("read discovery consumer: admitting the queue", "queue", queue, "err", err)
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues == nil || len(s.queues) >= servedMax {
		s.queues = map[string]servedAt{}
	}
	s.queues[queue] = servedAt{ok: ok, at: time.Now()}
	return ok
}

// usageTTL is how long a tenant's storage usage is trusted: read from the workers at most this
// often per tenant, however many submit.
const usageTTL = time.Second

// usages is the tenants' storage usage as last read, shared by all requests.
type usages struct {
	mu      sync.Mutex
	tenants map[string]*usageEntry
}

type usageEntry struct {
	mu    sync.Mutex // held while it is read: one read at a time per tenant
	at    time.Time
	usage protocol.TenantUsage
	// What this gateway admitted since the read: the workers count a job once it settles.
	sinceBytes, sinceJobs int64
	unknown               bool // the read failed: admit until the next one
}

// admitStorage refuses, with a *protocol.StorageFullError, a job of tenant whose request is
// bytes long when the tenant holds as much storage as its policy allows; the caller calls the
// release it returns when the job was not stored after all. The usage is the workers' count (the
// job index's, over NATS), at most usageTTL old, plus what this gateway admitted since; when it
// cannot be read the job is admitted, as with max_queued.
func (g *Gateway) admitStorage(ctx context.Context, tenant string, bytes int) (release func(), err error) {
	p := g.tenants.Of(tenant)
	if !p.HasStorageBounds() {
		return func() {}, nil
	}
	e := g.usageOf(tenant)
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.at) >= usageTTL {
		rctx, cancel := context.WithTimeout(ctx, backlogReadTimeout)
		u, err := g.inspector.TenantUsage(rctx, tenant)
		cancel()
		e.usage, e.at, e.sinceBytes, e.sinceJobs, e.unknown = u, time.Now(), 0, 0, err != nil
		if err != nil { // said once per usageTTL, not per request
			g.log.Warn("read tenant usage: admitting without the count", "tenant", tenant, "err", err)
		}
	}
	if e.unknown {
		return func() {}, nil
	}
	u := e.usage
	u.KeptBytes += e.sinceBytes
	u.JobsKept += e.sinceJobs
	if err := p.AdmitsStorage(tenant, u, int64(bytes)); err != nil {
		return nil, err
	}
	e.sinceBytes += int64(bytes)
	e.sinceJobs++
	at := e.at
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.at.Equal(at) { // not read again since: the read could not have counted it
				e.sinceBytes, e.sinceJobs = max(e.sinceBytes-int64(bytes), 0), max(e.sinceJobs-1, 0)
			}
		})
	}, nil
}

// both is a release of what a and b admitted.
func both(a, b func()) func() { return func() { a(); b() } }

func (g *Gateway) usageOf(tenant string) *usageEntry {
	g.usages.mu.Lock()
	defer g.usages.mu.Unlock()
	if g.usages.tenants == nil || len(g.usages.tenants) >= servedMax {
		g.usages.tenants = map[string]*usageEntry{}
	}
	e := g.usages.tenants[tenant]
	if e == nil {
		e = &usageEntry{}
		g.usages.tenants[tenant] = e
	}
	return e
}

// storageFullRetry is the Retry-After of a tenant_storage_full: room comes back as kept requests
// and artifacts expire, not within a second.
const storageFullRetry = 60
