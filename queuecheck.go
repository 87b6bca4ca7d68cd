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

// What the check reads: the tenant consumers' metadata keys, as the fleet's workers write them
// (internal/queue), and the tenants bucket's entries.
const (
	metaQueue  = "runfleet.queue"
	metaTenant = "runfleet.tenant"
	// defaultPolicy is the entry a tenant without its own takes.
	defaultPolicy = "default"

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

// queueChecks holds what a client knows of each tenant's queue.
type queueChecks struct {
	mu      sync.Mutex
	tenants map[string]*queueCount
}

// queueCount is one tenant's max_queued and queued count as last read, plus the jobs this client
// stored (or is storing) since.
type queueCount struct {
	mu        sync.Mutex // held while the count is read: one read at a time per tenant
	until     time.Time  // when the copy must be read again
	maxQueued int64
	queued    int64
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

// reserveQueued counts one more job of tenant as queued, or refuses it with a *QueueFullError
// when the tenant's max_queued is reached. The caller calls the release it returns when nothing
// was stored. A check that cannot be made (no bucket, no permission, a slow server) lets the job
// through: the check is advisory.
func (c *Client) reserveQueued(ctx context.Context, tenant string) (release func(), err error) {
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
			qc.maxQueued, qc.queued, qc.until = 0, 0, now.Add(queueCheckRetry)
		}
	}
	if qc.maxQueued > 0 && qc.queued >= qc.maxQueued {
		return nil, &QueueFullError{Tenant: tenant, Queued: qc.queued, MaxQueued: qc.maxQueued}
	}
	qc.queued++
	return func() {
		qc.mu.Lock()
		defer qc.mu.Unlock()
		qc.queued = max(qc.queued-1, 0)
	}, nil
}

// readQueued reads tenant's max_queued and, when it has one, its queued count into qc.
func (c *Client) readQueued(ctx context.Context, tenant string, qc *queueCount) error {
	ctx, cancel := context.WithTimeout(ctx, queueCheckTimeout)
	defer cancel()
	maxQueued, err := c.maxQueued(ctx, tenant)
	if err != nil {
		return err
	}
	qc.maxQueued, qc.queued = maxQueued, 0
	if maxQueued == 0 {
		return nil
	}
	qc.queued, err = c.queued(ctx, tenant)
	return err
}

// maxQueued reads tenant's max_queued from the tenants bucket: its own entry, else the default
// entry, else none (0). A missing bucket means no limits.
func (c *Client) maxQueued(ctx context.Context, tenant string) (int64, error) {
	for _, key := range []string{tenant, defaultPolicy} {
		v, ok, err := c.policyEntry(ctx, key)
		if err != nil || ok {
			return v, err
		}
		if key == defaultPolicy {
			break
		}
	}
	return 0, nil
}

// policyEntry reads one entry's max_queued by a direct get that names the key in its subject, so
// that a NATS user may be allowed its own tenant's entry and the default's only. An entry that
// does not decode counts as none, as the workers' and gateways' view of the bucket has it.
func (c *Client) policyEntry(ctx context.Context, key string) (maxQueued int64, ok bool, err error) {
	bucket := c.subjects.TenantsBucket()
	subject := c.directSubject("KV_"+bucket) + ".$KV." + bucket + "." + key
	m, err := c.js.Conn().RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) { // no bucket: no limits
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read tenant %s: %w", key, err)
	}
	sm, err := parseDirect(m)
	switch {
	case errors.Is(err, errNoMessage):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read tenant %s: %w", key, err)
	case sm.Header.Get("KV-Operation") != "": // a delete or a purge
		return 0, false, nil
	}
	var p struct {
		MaxQueued int64 `json:"max_queued"`
	}
	if json.Unmarshal(sm.Data, &p) != nil || p.MaxQueued < 0 {
		return 0, false, nil
	}
	return p.MaxQueued, true, nil
}

// queued sums the jobs waiting in tenant's consumers, one per queue, which the fleet marks with
// metadata: one request per 256 consumers of the jobs stream, whatever their backlogs hold.
func (c *Client) queued(ctx context.Context, tenant string) (int64, error) {
	subject := apiPrefix(c.js) + "CONSUMER.LIST." + c.subjects.JobsStream()
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
			if md := ci.Config.Metadata; md[metaTenant] == tenant && md[metaQueue] != "" {
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
