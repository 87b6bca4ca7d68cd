package runfleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/protocol"
)

// ErrQueueFull: the tenant has as many jobs queued (stored and not yet started) as its policy's
// max_queued allows (docs/protocol.md, "Tenants"); nothing was stored and retrying later is safe.
// Submit returns it wrapped in a *[QueueFullError], which says whose queue and how full.
//
// The check is advisory: the count is as old as the client's copy of it (Options.QueueCheckTTL,
// 1 s by default), plus the jobs this client stored since. One client never passes max_queued;
// several publishers of a tenant together may pass it by what the others store within one TTL,
// jobs of a queue whose tenant consumer no worker has made yet are not counted, and the server
// counts a stored job in its consumers' backlogs a moment after it acks the publish. The gateway
// enforces the bound where jobs enter over HTTP; a direct NATS publisher is bound only by its
// NATS account's limits.
var ErrQueueFull = errors.New("tenant queue full")

// QueueFullError is the error of a job refused for its tenant's max_queued. It matches
// [ErrQueueFull].
type QueueFullError struct {
	Tenant    string
	Queued    int64 // the tenant's jobs queued, as the client counts them
	MaxQueued int64 // the policy's bound
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("tenant %s has %d jobs queued, its max_queued is %d: %v", e.Tenant, e.Queued, e.MaxQueued, ErrQueueFull)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

const (
	// DefaultQueueCheckTTL is how long a client trusts its copy of a tenant's max_queued and
	// queued count.
	DefaultQueueCheckTTL = time.Second
	// queueCheckTimeout bounds a check: a user not allowed to read what it reads waits for a
	// permission-denied request to time out, and should set Options.SkipQueueCheck.
	queueCheckTimeout = time.Second
	// queueCheckRetry is how long a check that could not be made is not tried again: its
	// tenant's jobs are published unchecked meanwhile.
	queueCheckRetry = time.Minute
)

// ErrStorageFull: the tenant holds as much of the fleet's storage as its policy's
// max_kept_bytes, max_jobs_kept or max_artifact_bytes allows (docs/protocol.md, "Tenants");
// nothing was stored and retrying later, as its jobs expire, is safe. Submit returns it wrapped
// in a *protocol.StorageFullError, which says which bound. The check is advisory as max_queued's
// is, and made only when the policy sets a storage bound and the fleet's workers answer.
var ErrStorageFull = protocol.ErrStorageFull

// ErrUnknownQueue: the fleet declares its queues (docs/protocol.md, "Declared queues") and not
// this one for the job's tenant; nothing was stored. The check is advisory (the gateway and the
// workers enforce it) and made only where the fleet declares queues: a fleet that declares none
// serves whatever queue its workers serve, which the client does not look up.
var ErrUnknownQueue = protocol.ErrUnknownQueue

// queueChecks holds what a client knows of each tenant's queue.
type queueChecks struct {
	mu      sync.Mutex
	tenants map[string]*queueCount
}

// queueCount is one tenant's policy, queued count, storage usage and the fleet's queue
// declarations as last read, plus the jobs (and their bytes) this client stored (or is storing)
// since.
type queueCount struct {
	mu        sync.Mutex // held while the count is read: one read at a time per tenant
	until     time.Time  // when the copy must be read again
	policy    protocol.TenantPolicy
	queued    int64
	usage     protocol.TenantUsage
	keptSince int64            // request bytes stored since usage was read
	declared  *protocol.Queues // nil: the fleet declares no queues
}

func (q *queueChecks) of(tenant string) *queueCount {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tenants == nil {
		q.tenants = map[string]*queueCount{}
	}
	qc := q.tenants[tenant]
	if qc == nil {
		qc = &queueCount{}
		q.tenants[tenant] = qc
	}
	return qc
}

// reserveQueued checks a job of tenant on queue, whose body is bytes long, against the fleet's
// declared queues and the tenant's storage bounds and max_queued, and counts it as queued. It
// refuses with an error wrapping [ErrUnknownQueue], a *protocol.StorageFullError or a
// *QueueFullError. The caller calls the release it returns when nothing was stored. A check
// that cannot be made (no bucket, no permission, a slow server) lets the job through: the check
// is advisory.
func (c *Client) reserveQueued(ctx context.Context, queue, tenant string, bytes int) (release func(), err error) {
	if c.skipQueueCheck {
		return func() {}, nil
	}
	qc := c.checks.of(tenant)
	qc.mu.Lock()
	defer qc.mu.Unlock()
	if now := time.Now(); !now.Before(qc.until) {
		qc.until = now.Add(c.queueCheckTTL)
		if err := c.readQueued(ctx, tenant, qc); err != nil {
			if ctx.Err() != nil { // the caller gave up: nothing learnt, read again next time
				qc.until = time.Time{}
				return nil, withCtx(ctx, fmt.Errorf("queue check: %w", err))
			}
			qc.policy, qc.queued, qc.usage, qc.keptSince, qc.declared = protocol.TenantPolicy{}, 0, protocol.TenantUsage{}, 0, nil
			qc.until = now.Add(queueCheckRetry)
		}
	}
	if err := protocol.QueueAllowed(qc.declared, func(string) bool { return true }, queue, tenant); err != nil {
		return nil, err
	}
	u := qc.usage
	u.KeptBytes += qc.keptSince
	if err := qc.policy.AdmitsStorage(tenant, u, int64(bytes)); err != nil {
		return nil, err
	}
	if !qc.policy.AdmitsQueued(qc.queued) {
		return nil, &QueueFullError{Tenant: tenant, Queued: qc.queued, MaxQueued: qc.policy.MaxQueued}
	}
	qc.queued++
	qc.keptSince += int64(bytes)
	return func() {
		qc.mu.Lock()
		defer qc.mu.Unlock()
		qc.queued = max(qc.queued-1, 0)
		qc.keptSince = max(qc.keptSince-int64(bytes), 0)
	}, nil
}

// readQueued reads tenant's policy, the fleet's queue declarations and, as the policy bounds
// them, the tenant's queued count and storage usage into qc. A usage the workers do not answer
// is none: the storage check is the most advisory of the three.
func (c *Client) readQueued(ctx context.Context, tenant string, qc *queueCount) error {
	ctx, cancel := context.WithTimeout(ctx, queueCheckTimeout)
	defer cancel()
	policy, err := c.tenantPolicy(ctx, tenant)
	if err != nil {
		return err
	}
	declared, err := c.declaredQueues(ctx)
	if err != nil {
		return err
	}
	qc.policy, qc.declared, qc.queued, qc.usage, qc.keptSince = policy, declared, 0, protocol.TenantUsage{}, 0
	if policy.MaxQueued > 0 {
		if qc.queued, err = c.queued(ctx, tenant); err != nil {
			return err
		}
	}
	if policy.HasStorageBounds() {
		if err := c.request(ctx, protocol.UsageSubject(c.subjects), protocol.UsageRequest{Tenant: tenant}, &qc.usage); err != nil && ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// tenantPolicy reads tenant's policy from the tenants bucket: its own entry, else the default
// entry, else none (no bounds). A missing bucket means no limits.
func (c *Client) tenantPolicy(ctx context.Context, tenant string) (protocol.TenantPolicy, error) {
	for _, key := range []string{tenant, protocol.DefaultTenantPolicy} {
		p, ok, err := c.policyEntry(ctx, key)
		if err != nil || ok {
			return p, err
		}
	}
	return protocol.TenantPolicy{}, nil
}

// policyEntry reads one entry by a direct get that names the key in its subject, so that a NATS
// user may be allowed its own tenant's entry and the default's only. An entry that does not
// decode counts as none, the rule of [protocol.TenantPolicy].
func (c *Client) policyEntry(ctx context.Context, key string) (p protocol.TenantPolicy, ok bool, err error) {
	data, ok, err := c.bucketEntry(ctx, key)
	if err != nil || !ok {
		return p, false, err
	}
	if p, err = protocol.DecodeTenantPolicy(data); err != nil {
		return protocol.TenantPolicy{}, false, nil
	}
	return p, true, nil
}

// declaredQueues reads the fleet's queue declarations: nil when it has none. Declarations that do
// not decode declare queue default only, as the workers and gateways read them.
func (c *Client) declaredQueues(ctx context.Context) (*protocol.Queues, error) {
	data, ok, err := c.bucketEntry(ctx, protocol.QueuesKey)
	if err != nil || !ok {
		return nil, err
	}
	q, err := protocol.DecodeQueues(data)
	if err != nil {
		q = protocol.Queues{}
	}
	return &q, nil
}

// bucketEntry reads key of the tenants bucket by a direct get; ok is false when the bucket or
// the key is missing, or the key was deleted.
func (c *Client) bucketEntry(ctx context.Context, key string) (data []byte, ok bool, err error) {
	subject := protocol.KVDirectGetSubject(c.js, c.subjects.TenantsBucket(), key)
	m, err := c.js.Conn().RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) { // no bucket: no limits
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read tenants bucket key %s: %w", key, err)
	}
	sm, err := protocol.ParseDirectGet(m)
	switch {
	case errors.Is(err, protocol.ErrNoMessage):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read tenants bucket key %s: %w", key, err)
	case sm.Header.Get("KV-Operation") != "": // a delete or a purge
		return nil, false, nil
	}
	return sm.Data, true, nil
}

// queued sums the jobs waiting in tenant's consumers, one per queue, which the fleet marks with
// metadata: one request per 256 consumers of the jobs stream, whatever their backlogs hold.
func (c *Client) queued(ctx context.Context, tenant string) (int64, error) {
	subject := protocol.APIPrefix(c.js) + "CONSUMER.LIST." + c.subjects.JobsStream()
	var sum int64
	for offset := 0; ; {
		body, _ := json.Marshal(struct {
			Offset int `json:"offset"`
		}{offset})
		m, err := c.js.Conn().RequestWithContext(ctx, subject, body)
		if err != nil {
			return 0, fmt.Errorf("list consumers of %s: %w", c.subjects.JobsStream(), err)
		}
		var page struct {
			Error     *jetstream.APIError `json:"error"`
			Total     int                 `json:"total"`
			Consumers []struct {
				Config struct {
					Metadata map[string]string `json:"metadata"`
				} `json:"config"`
				NumPending uint64 `json:"num_pending"`
			} `json:"consumers"`
		}
		if err := json.Unmarshal(m.Data, &page); err != nil {
			return 0, fmt.Errorf("list consumers of %s: %w", c.subjects.JobsStream(), err)
		}
		if page.Error != nil {
			if page.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
				return 0, nil
			}
			return 0, fmt.Errorf("list consumers of %s: %w", c.subjects.JobsStream(), page.Error)
		}
		for _, ci := range page.Consumers {
			if md := ci.Config.Metadata; md[protocol.MetadataTenant] == tenant && md[protocol.MetadataQueue] != "" {
				sum += int64(ci.NumPending)
			}
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return sum, nil
		}
	}
}

// queueCheckOptions fills what NewClient keeps of o's queue check.
func (c *Client) queueCheckOptions(o Options) {
	c.skipQueueCheck = o.SkipQueueCheck
	c.queueCheckTTL = cmp.Or(o.QueueCheckTTL, DefaultQueueCheckTTL)
}
