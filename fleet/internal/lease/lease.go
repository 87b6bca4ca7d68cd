package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
)

// Defaults of [Options].
const (
	DefaultTTL       = 10 * time.Second
	DefaultRecordTTL = 7 * 24 * time.Hour
	DefaultSkew      = 2 * time.Second
	// A replica in sync acknowledges in well under a millisecond on one network; one that lags
	// a second is as good as gone.
	DefaultReplicaWait = time.Second
)

// ErrLost means the caller's lease ended: another generation holds the job, or the record moved
// on. Its holder must stop writing anything of the job.
var ErrLost = errors.New("lease lost")

// ErrNotReplicated means fewer replicas than [Options.Replicas] acknowledged a reservation in
// time: a failover could lose it, so the job must not be dispatched. The caller still holds the
// lease and releases the job.
var ErrNotReplicated = errors.New("reservation not acknowledged by enough replicas")

// Options configure a [Store]. Zero fields take the defaults named.
type Options struct {
	Prefix    string        // key prefix (package keyspace); default job.DefaultPrefix
	TTL       time.Duration // lease lifetime without a heartbeat; default DefaultTTL
	Drift     time.Duration // safety margin of the local trust window; default TTL/5
	RecordTTL time.Duration // how long a job's record is kept; default DefaultRecordTTL
	Skew      time.Duration // allowed clock difference between NATS and Redis; default DefaultSkew
	// Replicas is how many replicas must hold a reservation before Reserve returns (WAIT); 0
	// waits for none. Set it whenever the Redis has replicas: see the package documentation.
	Replicas int
	// ReplicaWait bounds that wait (and the trust window bounds it too); default DefaultReplicaWait.
	ReplicaWait time.Duration
	Now         func() time.Time
}

// Store runs the lease scripts against one Redis.
type Store struct {
	rdb   redis.UniversalClient
	keys  keyspace.Keys
	o     Options
	epoch time.Time // origin of the trust windows, on o.Now's clock (monotonic with time.Now)
}

// NewStore returns a store on rdb. rdb must honour contexts (go-redis's ContextTimeoutEnabled),
// so that no call outlives a lease's trust window.
func NewStore(rdb redis.UniversalClient, o Options) *Store {
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	o.Drift = cmp.Or(o.Drift, o.TTL/5)
	o.RecordTTL = cmp.Or(o.RecordTTL, DefaultRecordTTL)
	o.Skew = cmp.Or(o.Skew, DefaultSkew)
	o.ReplicaWait = cmp.Or(o.ReplicaWait, DefaultReplicaWait)
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{rdb: rdb, keys: keyspace.New(o.Prefix), o: o, epoch: o.Now()}
}

// since is the time on the trust windows' clock.
func (s *Store) since() time.Duration { return s.o.Now().Sub(s.epoch) }

// TTL is the lease lifetime.
func (s *Store) TTL() time.Duration { return s.o.TTL }

// Init marks the start of each bucket's epoch where it has none, so that jobs stored from now on
// and redelivered without a record are known never to have been claimed.
func (s *Store) Init(ctx context.Context) error {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("redis time: %w", err)
	}
	// One pipeline: one round trip on a single Redis, one per shard on a Cluster.
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range keyspace.Buckets {
			p.SetNX(ctx, s.keys.Epoch(b), t.UnixMilli(), 0)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("redis epoch: %w", err)
	}
	return nil
}

// Mode is what a claim allows.
type Mode string

// Modes of a claim; see the package documentation.
const (
	ModeRun        Mode = "run"
	ModeUnknown    Mode = "unknown"
	ModeRecordLost Mode = "record_lost"
	ModeSettled    Mode = "settled"
	ModeHeld       Mode = "held"
	ModeForeign    Mode = "foreign"
)

// Delivery is what the claimer knows of the message.
type Delivery struct {
	Count    uint64    // JetStream delivery count, 1 for the first
	QueuedAt time.Time // when JetStream stored the job
	Subject  string    // the message's subject, which the record keeps from the first claim
}

// Claim is the outcome of [Store.Claim]. Lease is nil for ModeSettled, ModeHeld and ModeForeign.
type Claim struct {
	Mode     Mode
	Failures int    // pre-dispatch failures counted so far
	Status   string // for ModeSettled: the stored status
	Subject  string // for ModeForeign: the subject the job was first claimed from
	Lease    *Lease
}

// Claim takes tenant's job id's lease for owner, unless the job settled or another worker holds
// it.
func (s *Store) Claim(ctx context.Context, tenant, id, owner string, d Delivery) (Claim, error) {
	sent := s.since()
	res, err := s.keys.Claim(tenant, id, owner, s.o.TTL, d.Count, d.QueuedAt, s.o.RecordTTL, s.o.Skew, d.Subject).Run(ctx, s.rdb).Slice()
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", id, err)
	}
	if len(res) != 4 {
		return Claim{}, fmt.Errorf("claim %s: unexpected reply %v", id, res)
	}
	mode, _ := res[0].(string)
	gen, _ := res[1].(int64)
	failures, _ := res[2].(int64)
	detail, _ := res[3].(string)
	c := Claim{Mode: Mode(mode), Failures: int(failures)}
	switch c.Mode {
	case ModeSettled:
		c.Status = detail
	case ModeForeign:
		c.Subject = detail
	case ModeHeld:
	default:
		c.Lease = &Lease{s: s, tenant: tenant, id: id, owner: owner, gen: gen}
		c.Lease.validUntil.Store(int64(sent + s.o.TTL - s.o.Drift))
	}
	return c, nil
}

// Record is a job's record as stored, for inspection.
type Record map[string]string

// Lookup returns tenant's job id's record, empty when there is none.
func (s *Store) Lookup(ctx context.Context, tenant, id string) (Record, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Record(tenant, id)).Result()
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", id, err)
	}
	return Record(m), nil
}

// Held reports whether tenant's job id has a live lease. An error counts as held, so that a caller
// deciding what to remove errs on the side of keeping.
func (s *Store) Held(ctx context.Context, tenant, id string) bool {
	n, err := s.rdb.Exists(ctx, s.keys.Lease(tenant, id)).Result()
	return err != nil || n == 1
}

// Lease is one generation's hold on a job. Its methods are safe for concurrent use: the
// heartbeat extends the window that every writer checks.
type Lease struct {
	s      *Store
	tenant string
	id     string
	owner  string
	gen    int64
	// validUntil closes the local trust window (see the package documentation), in nanoseconds on
	// the store's monotonic clock; 0 once the lease ended.
	validUntil atomic.Int64
}

// JobID is the leased job's id.
func (l *Lease) JobID() string { return l.id }

// Tenant is the leased job's tenant.
func (l *Lease) Tenant() string { return l.tenant }

// Generation is the fencing token.
func (l *Lease) Generation() int64 { return l.gen }

// Valid reports whether the local trust window is still open.
func (l *Lease) Valid() bool { return l.Remaining() > 0 }

// Remaining is how long the trust window stays open without an extend.
func (l *Lease) Remaining() time.Duration {
	return time.Duration(l.validUntil.Load()) - l.s.since()
}

// end closes the trust window for good.
func (l *Lease) end() { l.validUntil.Store(0) }

func (l *Lease) check() error {
	if !l.Valid() {
		return fmt.Errorf("job %s generation %d: %w (trust window closed)", l.id, l.gen, ErrLost)
	}
	return nil
}

func (l *Lease) fenced(op string, err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "FENCED") {
		return fmt.Errorf("%s %s generation %d: %w: %s", op, l.id, l.gen, ErrLost, strings.TrimPrefix(err.Error(), "FENCED "))
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, l.id, err)
	}
	return nil
}

// Extend renews the lease and its trust window. It waits no longer than the window stays open:
// a Redis that does not answer cannot keep a caller past it.
func (l *Lease) Extend(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, l.Remaining())
	defer cancel()
	sent := l.s.since()
	n, err := l.s.keys.Extend(l.tenant, l.id, l.gen, l.owner, l.s.o.TTL, l.s.o.RecordTTL).Run(ctx, l.s.rdb).Int()
	if err != nil {
		return fmt.Errorf("extend %s: %w", l.id, err)
	}
	if n != 1 {
		l.end()
		return fmt.Errorf("extend %s generation %d: %w", l.id, l.gen, ErrLost)
	}
	// Only ever forward: a reply that arrives late must not reopen a window a later one set.
	until := int64(sent + l.s.o.TTL - l.s.o.Drift)
	for {
		old := l.validUntil.Load()
		if old == 0 || old >= until || l.validUntil.CompareAndSwap(old, until) {
			return nil
		}
	}
}

// Reserve records, before any of the job's data enters a sandbox, that it is about to. When it
// returns an error other than ErrLost the reservation may or may not be stored: the job must be
// treated as dispatched by everyone after, and not be dispatched by the caller.
func (l *Lease) Reserve(ctx context.Context, payloadSHA256, profileDigest, provider string) error {
	if err := l.check(); err != nil {
		return err
	}
	call := l.s.keys.Reserve(l.tenant, l.id, l.gen, l.owner, payloadSHA256, profileDigest, provider)
	if l.s.o.Replicas == 0 {
		return l.fenced("reserve", call.Run(ctx, l.s.rdb).Err())
	}
	return l.reserveReplicated(ctx, call)
}

// reserveReplicated runs reserve.lua and WAIT in one pipeline. WAIT cannot run in a script and
// counts the writes of its own connection only, so both go to the job's master on one
// connection: a Cluster client would send the keyless WAIT to any node.
func (l *Lease) reserveReplicated(ctx context.Context, call keyspace.Call) error {
	ctx, cancel := context.WithTimeout(ctx, l.Remaining())
	defer cancel()
	var c *redis.Client
	switch rdb := l.s.rdb.(type) {
	case *redis.Client:
		c = rdb
	case *redis.ClusterClient:
		m, err := rdb.MasterForKey(ctx, l.s.keys.Record(l.tenant, l.id))
		if err != nil {
			return fmt.Errorf("reserve %s: %w", l.id, err)
		}
		c = m
	default:
		return fmt.Errorf("reserve %s: replicas to wait for on a %T", l.id, rdb)
	}
	// The reply must come back inside the trust window, with a margin for the round trip.
	wait := max(min(l.s.o.ReplicaWait, l.Remaining()*3/4), time.Millisecond)
	var reserved, acked *redis.Cmd
	run := func() error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			reserved = call.EvalSha(ctx, p)
			acked = p.Do(ctx, "WAIT", l.s.o.Replicas, wait.Milliseconds())
			return nil
		})
		return err
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(reserved.Err(), "NOSCRIPT") {
		if err = call.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("reserve %s: %w", l.id, err)
		}
		err = run()
	}
	if err := reserved.Err(); err != nil {
		return l.fenced("reserve", err)
	}
	if err != nil {
		return fmt.Errorf("reserve %s: %w", l.id, err)
	}
	if n, _ := acked.Int64(); n < int64(l.s.o.Replicas) {
		return fmt.Errorf("reserve %s: %d of %d replicas in %v: %w", l.id, n, l.s.o.Replicas, wait, ErrNotReplicated)
	}
	return nil
}

// Clear returns the record of an in-doubt claim ([ModeUnknown], [ModeRecordLost]) to claimed, so
// that the job runs under this lease: the holder calls it only once the job's dispatch marker
// proved that no earlier attempt passed the dispatch gate, and that none can now (package
// queue's Results.PassGate).
func (l *Lease) Clear(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	return l.fenced("clear", l.s.keys.Clear(l.tenant, l.id, l.gen, l.owner).Run(ctx, l.s.rdb).Err())
}

// Associate records the sandbox the reserved payload is about to enter.
func (l *Lease) Associate(ctx context.Context, sandboxID string) error {
	if err := l.check(); err != nil {
		return err
	}
	return l.fenced("associate", l.s.keys.Associate(l.tenant, l.id, l.gen, l.owner, sandboxID).Run(ctx, l.s.rdb).Err())
}

// Settled records that the holder's settlement is stored, and ends the lease. It fails with
// ErrLost when the lease or the record moved on; the settlement is stored all the same, and
// [Store.Adopt] records it.
func (l *Lease) Settled(ctx context.Context, status string) error {
	err := l.s.keys.Settle(l.tenant, l.id, l.gen, l.owner, status, l.s.o.RecordTTL).Run(ctx, l.s.rdb).Err()
	l.end()
	return l.fenced("settle", err)
}

// Release gives the lease up before any dispatch; failed counts a pre-dispatch failure. It
// returns the failures counted so far. It fails with ErrLost once the lease ran out, even when
// the record still carries this generation: a failover may have lost a later claim and its
// settlement, and a withdrawn reservation would let the job run after it settled. The record
// stays in doubt then, and the job's next claim asks its settlement and dispatch marker.
func (l *Lease) Release(ctx context.Context, failed bool) (int, error) {
	n, err := l.s.keys.Release(l.tenant, l.id, l.gen, l.owner, failed).Run(ctx, l.s.rdb).Int()
	l.end()
	return n, l.fenced("release", err)
}

// Adopt records a settlement that JetStream already holds for tenant's job id, whichever attempt
// stored it: the record moves forward to settled and never back. held, when not nil, is the
// caller's own lease of the job, which ends.
func (s *Store) Adopt(ctx context.Context, tenant, id, status string, held *Lease) error {
	var gen int64
	owner := ""
	if held != nil {
		gen, owner = held.gen, held.owner
		held.end()
	}
	if err := s.keys.Adopt(tenant, id, status, s.o.RecordTTL, gen, owner).Run(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("adopt settlement of %s: %w", id, err)
	}
	return nil
}
