package fairshare

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Running keeps the fleet-wide count of each tenant's jobs that hold a sandbox, in Redis: one
// sorted set per tenant, of slot tokens scored by their expiry. A tenant's key hashes to a slot
// of its own ({t:<tenant>}), and its script touches that key only, so it runs on Redis Cluster.
type Running struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	owner  string
	seq    atomic.Uint64

	mu   sync.Mutex
	held map[string]map[string]struct{} // tenant → tokens this worker holds
}

// NewRunning returns the running counts under key prefix; a worker's slots expire ttl after their
// last renewal (the lease TTL: a dead worker's slots come back when its leases end).
func NewRunning(rdb redis.UniversalClient, prefix, owner string, ttl time.Duration) *Running {
	return &Running{rdb: rdb, prefix: prefix, ttl: ttl, owner: owner, held: map[string]map[string]struct{}{}}
}

// Key is tenant's running set.
func (r *Running) Key(tenant string) string { return r.prefix + ":{t:" + tenant + "}:running" }

// acquireScript drops expired slots, then adds up to ARGV[3] tokens while fewer than ARGV[2] are
// held, and returns how many it added. The clock is the server's: workers' clocks may differ.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local n = math.min(free, tonumber(ARGV[3]))
if n <= 0 then return 0 end
for i = 1, n do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[3 + i])
end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return n
`)

// renewScript moves the expiry of the tokens that are still held (XX: one that expired meanwhile
// is not brought back, its slot may be another's now).
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = 0
for i = 2, #ARGV do
  kept = kept + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return kept
`)

// Acquire takes up to n of tenant's slots while it holds fewer than limit, and returns the
// tokens taken (none when it is at its limit).
func (r *Running) Acquire(ctx context.Context, tenant string, n int, limit int64) ([]string, error) {
	tokens := make([]string, n)
	args := make([]any, 0, 3+n)
	args = append(args, r.ttl.Milliseconds(), limit, n)
	for i := range tokens {
		tokens[i] = r.owner + "/" + strconv.FormatUint(r.seq.Add(1), 10)
		args = append(args, tokens[i])
	}
	got, err := acquireScript.Run(ctx, r.rdb, []string{r.Key(tenant)}, args...).Int()
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
	if err := r.rdb.ZRem(ctx, r.Key(tenant), members...).Err(); err != nil {
		return fmt.Errorf("release running slots of tenant %s: %w", tenant, err)
	}
	return nil
}

// Count returns how many of tenant's slots are held and not expired.
func (r *Running) Count(ctx context.Context, tenant string) (int64, error) {
	n, err := r.rdb.ZCount(ctx, r.Key(tenant), "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
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
		held := make(map[string][]any, len(r.held))
		for tenant, tokens := range r.held {
			args := []any{r.ttl.Milliseconds()}
			for t := range tokens {
				args = append(args, t)
			}
			held[tenant] = args
		}
		r.mu.Unlock()
		for tenant, args := range held {
			if err := renewScript.Run(ctx, r.rdb, []string{r.Key(tenant)}, args...).Err(); err != nil && ctx.Err() == nil {
				log.Warn("renew running slots", "tenant", tenant, "err", err)
			}
		}
	}
}
