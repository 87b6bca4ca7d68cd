package fairshare

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
)

// Policies says each tenant's policy; *tenant.Policies does, live.
type Policies interface {
	Of(tenant string) tenant.Policy
}

// Options configure a [Scheduler]. Zero fields take the defaults named.
type Options struct {
	// Window is the time constant of the usage's decay; default 20 s. Shares are measured over a
	// few of it.
	Window time.Duration
	// Policies gives weights and max_running; default: every tenant weight 1, no limits.
	Policies Policies
	// Running keeps max_running across the fleet; nil: no tenant is capped.
	Running *Running
	// Blocked is how long a tenant at its max_running is passed over before it is asked again
	// (another worker's job may have ended meanwhile); default 250 ms.
	Blocked time.Duration
	// InitialCost is the CPU milliseconds a job of a tenant not yet measured is assumed to cost;
	// default 10.
	InitialCost float64
	Logger      *slog.Logger
	Now         func() time.Time
}

// Scheduler picks the tenant consumer a worker fetches from next. Its methods are safe for
// concurrent use.
type Scheduler struct {
	o Options

	mu      sync.Mutex
	pairs   map[queue.Pair]*entry
	tenants map[string]*account
	wake    chan struct{} // closed, and replaced, to wake every waiting pick
	waiting int           // picks waiting on wake
	turn    uint64
	bests   uint64 // calls of best: a tenant's score is computed once in each
}

type entry struct {
	pair   queue.Pair
	src    *queue.Source
	active bool
	last   uint64 // the turn it was last picked: ties go to the longest waiting

	announced uint64    // the stream sequence of its last job announced
	seen      uint64    // the last stream sequence it fetched, or gave up waiting for
	recheck   time.Time // not picked before then: the announced job was not there yet
	rechecks  int       // made for the last job announced

	// fetching: a grant of it is out, not yet Fetched. Another pick would fetch beside it and
	// mostly come back empty; one fetch brings a job for every slot it was granted.
	fetching bool
}

// The server counts a stored job in a consumer's backlog a moment after it announces it (its
// consumers are signalled from a queue of their own, late when the server is busy), and a fetch
// that does not wait reads that count: a fetch right after an announcement may come back without
// the job. A pair whose fetch came short of its last announced job is fetched again after
// recheckAfter, doubling, up to maxRechecks times (310 ms in all), instead of waiting idle for
// the next announcement or sweep. Another worker may have taken the job: then the rechecks find
// nothing, and the pair is idle after them.
const (
	recheckAfter = 10 * time.Millisecond
	maxRechecks  = 5
)

type account struct {
	usage   float64   // decayed CPU ms, estimates of unsettled jobs included
	at      time.Time // when usage was last decayed
	cost    float64   // the tenant's average CPU ms per job
	active  int       // its active pairs
	blocked time.Time // at max_running until then

	score    float64 // usage per weight, as best computed it
	scoredBy uint64  // the best call that computed score
}

// New returns a scheduler that knows no tenant yet.
func New(o Options) *Scheduler {
	o.Window = cmp.Or(o.Window, 20*time.Second)
	o.Blocked = cmp.Or(o.Blocked, 250*time.Millisecond)
	o.InitialCost = cmp.Or(o.InitialCost, 10)
	if o.Policies == nil {
		o.Policies = &tenant.Policies{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return &Scheduler{o: o, pairs: map[queue.Pair]*entry{}, tenants: map[string]*account{}, wake: make(chan struct{})}
}

// Add makes p's consumer one the scheduler may pick, active: it may hold jobs. It reports false
// when p was known already.
func (s *Scheduler) Add(p queue.Pair, src *queue.Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pairs[p]; ok {
		return false
	}
	s.pairs[p] = &entry{pair: p, src: src}
	s.activate(s.pairs[p])
	return true
}

// Replace puts src in place of p's consumer, which was lost and made again (or replaced by
// another worker), and marks p active: the new consumer may deliver what the old one held. A
// grant out on the old consumer ends as any other. It reports false when p was not known.
func (s *Scheduler) Replace(p queue.Pair, src *queue.Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pairs[p]
	if ok {
		e.src = src
		e.recheck, e.rechecks = time.Time{}, 0
		s.activate(e)
	}
	return ok
}

// Source returns p's consumer; nil when p is not known.
func (s *Scheduler) Source(p queue.Pair) *queue.Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.pairs[p]; ok {
		return e.src
	}
	return nil
}

// Known reports whether p's consumer was added.
func (s *Scheduler) Known(p queue.Pair) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pairs[p]
	return ok
}

// Pairs returns the pairs added.
func (s *Scheduler) Pairs() []queue.Pair {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]queue.Pair, 0, len(s.pairs))
	for p := range s.pairs {
		out = append(out, p)
	}
	return out
}

// Arrived marks p active: its job of stream sequence seq was stored, or when seq is 0 some may
// wait. It reports whether p is known.
func (s *Scheduler) Arrived(p queue.Pair, seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pairs[p]
	if ok {
		if seq > e.announced {
			// A new announcement is fetched now, and has rechecks of its own.
			e.announced, e.recheck, e.rechecks = seq, time.Time{}, 0
		}
		s.activate(e)
	}
	return ok
}

// activate marks e active and wakes a waiting pick; the caller holds mu.
func (s *Scheduler) activate(e *entry) {
	if !e.active {
		e.active = true
		a := s.account(e.pair.Tenant)
		if a.active == 0 {
			// Coming back from idle, the tenant starts level with the least served of the
			// others: no credit banked while it had nothing to run.
			if floor, ok := s.floor(e.pair.Tenant); ok {
				a.usage = max(s.decayed(a), floor*s.weight(e.pair.Tenant))
			}
		}
		a.active++
	}
	s.wakeAll()
}

// wakeAll wakes every waiting pick: each looks again, and may find a pair of its own (a single
// token would wake one, and leave the others holding their free slots); the caller holds mu.
func (s *Scheduler) wakeAll() {
	if s.waiting == 0 {
		return
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// idle marks e idle; the caller holds mu.
func (s *Scheduler) idle(e *entry) {
	if e.active {
		e.active = false
		s.account(e.pair.Tenant).active--
	}
}

// floor is the least usage per weight among the active tenants other than except.
func (s *Scheduler) floor(except string) (float64, bool) {
	best, ok := math.Inf(1), false
	for t, a := range s.tenants {
		if t == except || a.active == 0 {
			continue
		}
		best, ok = min(best, s.decayed(a)/s.weight(t)), true
	}
	return best, ok
}

func (s *Scheduler) weight(tenant string) float64 { return s.o.Policies.Of(tenant).EffectiveWeight() }

func (s *Scheduler) account(tenant string) *account {
	a, ok := s.tenants[tenant]
	if !ok {
		a = &account{at: s.o.Now(), cost: s.o.InitialCost}
		s.tenants[tenant] = a
	}
	return a
}

// decayed brings a's usage to now and returns it.
func (s *Scheduler) decayed(a *account) float64 {
	now := s.o.Now()
	if dt := now.Sub(a.at); dt > 0 {
		a.usage *= math.Exp(-float64(dt) / float64(s.o.Window))
		a.at = now
	}
	return a.usage
}

// Grant is one pick: up to N jobs may be fetched from Source for Pair.
type Grant struct {
	Pair   queue.Pair
	Source *queue.Source
	N      int
	s      *Scheduler
	tokens []string
	cost   float64
}

// Pick waits until some tenant has an active consumer and may start a job, and grants up to n
// jobs of the one that used least per weight. It returns ctx's error when ctx ends first.
func (s *Scheduler) Pick(ctx context.Context, n int) (*Grant, error) {
	for {
		s.mu.Lock()
		e, next := s.best()
		if e == nil {
			wake := s.wake
			s.waiting++
			s.mu.Unlock()
			err := s.wait(ctx, wake, next)
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		s.turn++
		e.last, e.fetching = s.turn, true
		p, src := e.pair, e.src
		s.mu.Unlock()

		g := &Grant{Pair: p, Source: src, N: n, s: s}
		if limit := s.o.Policies.Of(p.Tenant).MaxRunning; limit > 0 && s.o.Running != nil {
			tokens, err := s.o.Running.Acquire(ctx, p.Tenant, n, limit)
			if err != nil {
				if ctx.Err() != nil {
					s.unfetch(e, false)
					return nil, ctx.Err()
				}
				s.o.Logger.Warn("max_running", "tenant", p.Tenant, "err", err)
			}
			if len(tokens) == 0 {
				s.unfetch(e, true)
				continue
			}
			g.N, g.tokens = len(tokens), tokens
		}
		s.mu.Lock()
		a := s.account(p.Tenant)
		g.cost = a.cost
		s.decayed(a)
		a.usage += g.cost * float64(g.N)
		s.mu.Unlock()
		return g, nil
	}
}

// wait waits for an activation, a job's end, ctx's end or, when until is set, until then.
func (s *Scheduler) wait(ctx context.Context, wake <-chan struct{}, until time.Time) error {
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(until.Sub(s.o.Now()))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-wake:
	case <-timer:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// best returns the active entry of the tenant with the least usage per weight that is not
// blocked nor waiting for a recheck, or nil and when the first of those may be asked again; the
// caller holds mu.
func (s *Scheduler) best() (*entry, time.Time) {
	now := s.o.Now()
	var best *entry
	var bestScore float64
	var next time.Time
	s.bests++
	for _, e := range s.pairs {
		if !e.active || e.fetching {
			continue
		}
		a := s.account(e.pair.Tenant)
		if until := later(a.blocked, e.recheck); until.After(now) {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		if a.scoredBy != s.bests {
			a.score, a.scoredBy = s.decayed(a)/s.weight(e.pair.Tenant), s.bests
		}
		score := a.score
		if best == nil || score < bestScore || score == bestScore && e.last < best.last {
			best, bestScore = e, score
		}
	}
	return best, next
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unfetch ends e's grant that fetched nothing, its tenant at max_running when block.
func (s *Scheduler) unfetch(e *entry, block bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.fetching = false
	if block {
		s.account(e.pair.Tenant).blocked = s.o.Now().Add(s.o.Blocked)
	}
	s.wakeAll()
}

// Fetched says the fetch brought got of g's N jobs, the last of stream sequence last. Fewer than N
// means the consumer has no more waiting for this worker, once the last job announced came or was
// waited for: it is idle until the stream says otherwise. It returns a handle for each job that
// came, and gives back the rest of the grant.
func (g *Grant) Fetched(ctx context.Context, got int, last uint64) []*Job {
	s := g.s
	s.mu.Lock()
	a := s.account(g.Pair.Tenant)
	s.decayed(a)
	a.usage = max(0, a.usage-g.cost*float64(g.N-got))
	if e := s.pairs[g.Pair]; e != nil {
		e.fetching = false
		e.seen = max(e.seen, last)
		switch {
		case got == g.N:
			s.wakeAll() // more may wait: a pick waiting for it may have slots
		case e.announced > e.seen && e.rechecks < maxRechecks:
			e.recheck = s.o.Now().Add(recheckAfter << e.rechecks)
			e.rechecks++
		default:
			e.seen = max(e.seen, e.announced)
			s.idle(e)
		}
	}
	if got > 0 && a.blocked.After(s.o.Now()) {
		a.blocked = time.Time{}
	}
	s.mu.Unlock()
	if got < len(g.tokens) {
		if err := s.o.Running.Release(context.WithoutCancel(ctx), g.Pair.Tenant, g.tokens[got:]...); err != nil {
			s.o.Logger.Warn("max_running", "tenant", g.Pair.Tenant, "err", err)
		}
	}
	jobs := make([]*Job, got)
	for i := range jobs {
		jobs[i] = &Job{s: s, tenant: g.Pair.Tenant, cost: g.cost}
		if i < len(g.tokens) {
			jobs[i].token = g.tokens[i]
		}
	}
	return jobs
}

// Job is one fetched job's share of its tenant's account.
type Job struct {
	s      *Scheduler
	tenant string
	cost   float64
	token  string
	once   sync.Once
}

// Done ends j: its measured CPU time replaces the estimate it was charged (cpuMS < 0 when nothing
// was measured: a job that never ran keeps no charge), and its running slot is given back.
func (j *Job) Done(ctx context.Context, cpuMS int64) {
	if j == nil {
		return
	}
	j.once.Do(func() {
		s := j.s
		s.mu.Lock()
		a := s.account(j.tenant)
		s.decayed(a)
		actual := max(float64(cpuMS), 0)
		a.usage = max(0, a.usage-j.cost+actual)
		if cpuMS >= 0 {
			a.cost = 0.8*a.cost + 0.2*max(actual, 1)
		}
		a.blocked = time.Time{}
		s.mu.Unlock()
		if j.token != "" {
			if err := s.o.Running.Release(context.WithoutCancel(ctx), j.tenant, j.token); err != nil {
				s.o.Logger.Warn("max_running", "tenant", j.tenant, "err", err)
			}
		}
		s.mu.Lock()
		s.wakeAll()
		s.mu.Unlock()
	})
}
