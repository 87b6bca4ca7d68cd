package fairshare

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
)

// Running keeps the fleet-wide count of each tenant's jobs that hold a sandbox, in Redis: one
// sorted set per tenant, of slot tokens scored by their expiry ([keyspace.Keys.Running], a slot
// of its own per tenant).
type Running struct {
	rdb   redis.UniversalClient
	keys  keyspace.Keys
	ttl   time.Duration
	owner string
	seq   atomic.Uint64

	mu   sync.Mutex
	held map[string]map[string]struct{} // tenant → tokens this worker holds
}

// NewRunning returns the running counts under key prefix (package keyspace); a worker's slots
// expire ttl after their last renewal (the lease TTL: a dead worker's slots come back when its
// leases end).
func NewRunning(rdb redis.UniversalClient, prefix, owner string, ttl time.Duration) *Running {
	return &Running{rdb: rdb, keys: keyspace.New(prefix), ttl: ttl, owner: owner, held: map[string]map[string]struct{}{}}
}

// Acquire takes up to n of tenant's slots while it holds fewer than limit, and returns the
// tokens taken (none when it is at its limit).
func (r *Running) Acquire(ctx context.Context, tenant string, n int, limit int64) ([]string, error) {
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = r.owner + "/" + strconv.FormatUint(r.seq.Add(1), 10)
	}
	got, err := r.keys.Acquire(tenant, r.ttl, limit, tokens).Run(ctx, r.rdb).Int()
	if err != nil {
		return nil, fmt.Errorf("acquire running slot of tenant %s: %w", tenant, err)
	}
	tokens = tokens[:got]
	if got > 0 {
		r.mu.Lock()
		if r.held[tenant] == nil {
			r.held[tenant] = map[string]struct{}{}
		}
		for _, t := range tokens {
			r.held[tenant][t] = struct{}{}
		}
		r.mu.Unlock()
	}
	return tokens, nil
}

// Release gives tenant's tokens back.
func (r *Running) Release(ctx context.Context, tenant string, tokens ...string) error {
	if len(tokens) == 0 {
		return nil
	}
	r.mu.Lock()
	for _, t := range tokens {
		delete(r.held[tenant], t)
	}
	if len(r.held[tenant]) == 0 {
		delete(r.held, tenant)
	}
	r.mu.Unlock()
	members := make([]any, len(tokens))
	for i, t := range tokens {
		members[i] = t
	}
	if err := r.rdb.ZRem(ctx, r.keys.Running(tenant), members...).Err(); err != nil {
		return fmt.Errorf("release running slots of tenant %s: %w", tenant, err)
	}
	return nil
}

// Count returns how many of tenant's slots are held and not expired.
func (r *Running) Count(ctx context.Context, tenant string) (int64, error) {
	n, err := r.rdb.ZCount(ctx, r.keys.Running(tenant), "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("count running slots of tenant %s: %w", tenant, err)
	}
	return n, nil
}

// Keep renews the slots this worker holds every third of the TTL until ctx ends. A renewal that
// fails is logged and tried again at the next tick; a slot not renewed within the TTL expires,
// and the fleet may then run one more of the tenant's jobs than its bound until this one ends.
func (r *Running) Keep(ctx context.Context, log *slog.Logger) {
	tick := time.NewTicker(r.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		held := make(map[string][]string, len(r.held))
		for tenant, tokens := range r.held {
			held[tenant] = slices.Collect(maps.Keys(tokens))
		}
		r.mu.Unlock()
		for tenant, tokens := range held {
			if err := r.keys.Renew(tenant, r.ttl, tokens).Run(ctx, r.rdb).Err(); err != nil && ctx.Err() == nil {
				log.Warn("renew running slots", "tenant", tenant, "err", err)
			}
		}
	}
}
