package pool

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// Defaults of [Options].
const (
	DefaultMaxAge  = 5 * time.Minute
	DefaultRefills = 1
)

// Creator makes sandboxes; a [sandbox.Provider] is one.
type Creator interface {
	Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error)
}

// Observer hears how many sandboxes wait and how takes were served, for metrics. Its methods
// must not block.
type Observer interface {
	Waiting(profile string, n int)
	Took(profile string, warm bool, wait time.Duration)
}

// Options configure a [Pool]. Zero fields take the defaults named.
type Options struct {
	Size    int           // sandboxes kept waiting per profile; 0 keeps none, and every Take creates
	MaxAge  time.Duration // longest a sandbox waits before it is replaced; default DefaultMaxAge
	Refills int           // creations at once, across profiles; default DefaultRefills
	Logger  *slog.Logger
	// Observer, when set, hears of waiting counts and takes.
	Observer Observer
}

// Pool keeps sandboxes waiting, per profile. Its zero value is not usable: see [New].
type Pool struct {
	c    Creator
	o    Options
	log  *slog.Logger
	wake chan struct{}

	mu      sync.Mutex
	lanes   map[string]*lane
	running bool // Run keeps sandboxes; before and after it, Take creates each
}

// lane is one profile's waiting sandboxes.
type lane struct {
	shape    sandbox.Shape
	idle     []waiting // oldest first
	making   int
	backoff  time.Duration
	retryAt  time.Time
	lastSeen int // last count told to the observer
}

type waiting struct {
	sb   sandbox.Sandbox
	made time.Time
}

// New returns a pool that keeps sandboxes of each of shapes, one shape per profile name. It
// starts nothing: [Pool.Run] fills it.
func New(c Creator, shapes []sandbox.Shape, o Options) *Pool {
	o.MaxAge = cmp.Or(o.MaxAge, DefaultMaxAge)
	o.Refills = max(o.Refills, DefaultRefills)
	p := &Pool{c: c, o: o, log: cmp.Or(o.Logger, slog.Default()), wake: make(chan struct{}, 1), lanes: map[string]*lane{}}
	for _, s := range shapes {
		p.lanes[s.Profile.Name] = &lane{shape: s, lastSeen: -1}
	}
	return p
}

// Waiting returns how many sandboxes wait now, across profiles.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lanes {
		n += len(l.idle)
	}
	return n
}

// WaitingFor returns how many sandboxes of profile wait now.
func (p *Pool) WaitingFor(profile string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[profile]; l != nil {
		return len(l.idle)
	}
	return 0
}

// Take returns a sandbox for a job of shape: a waiting one when one fits (warm is true), else
// one created now. The caller assigns, runs and destroys it.
func (p *Pool) Take(ctx context.Context, shape sandbox.Shape) (sb sandbox.Sandbox, warm bool, err error) {
	start := time.Now()
	name := shape.Profile.Name
	p.mu.Lock()
	if l := p.lanes[name]; l != nil && p.running && len(l.idle) > 0 && l.shape.Fits(shape) {
		sb = l.idle[0].sb
		l.idle = slices.Delete(l.idle, 0, 1)
	}
	p.mu.Unlock()
	if sb != nil {
		p.signal()
		p.observe(name, true, time.Since(start))
		return sb, true, nil
	}
	sb, err = p.c.Create(ctx, shape)
	p.observe(name, false, time.Since(start))
	return sb, false, err
}

func (p *Pool) observe(profile string, warm bool, wait time.Duration) {
	if p.o.Observer != nil {
		p.o.Observer.Took(profile, warm, wait)
	}
	p.report()
}

// report tells the observer the waiting counts that changed.
func (p *Pool) report() {
	if p.o.Observer == nil {
		return
	}
	p.mu.Lock()
	type count struct {
		name string
		n    int
	}
	var changed []count
	for name, l := range p.lanes {
		if len(l.idle) != l.lastSeen {
			l.lastSeen = len(l.idle)
			changed = append(changed, count{name, l.lastSeen})
		}
	}
	p.mu.Unlock()
	for _, c := range changed {
		p.o.Observer.Waiting(c.name, c.n)
	}
}

func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run fills the pool and keeps it filled until ctx ends; then it waits for the creations in
// flight, destroys every waiting sandbox, and returns.
func (p *Pool) Run(ctx context.Context) {
	p.mu.Lock()
	p.running = true
	p.mu.Unlock()
	var wg sync.WaitGroup
	slots := make(chan struct{}, p.o.Refills)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.expire(&wg)
		p.fill(ctx, &wg, slots)
		p.report()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.running = false
			var left []sandbox.Sandbox
			for _, l := range p.lanes {
				for _, w := range l.idle {
					left = append(left, w.sb)
				}
				l.idle = nil
			}
			p.mu.Unlock()
			for _, sb := range left {
				wg.Go(func() { p.destroy(ctx, sb) })
			}
			wg.Wait()
			p.report()
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// fill starts creations for every lane short of Size, as many as free refill slots allow.
func (p *Pool) fill(ctx context.Context, wg *sync.WaitGroup, slots chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, l := range p.lanes {
		for len(l.idle)+l.making < p.o.Size && now.After(l.retryAt) {
			select {
			case slots <- struct{}{}:
			default:
				return // a creation that ends wakes Run
			}
			l.making++
			wg.Go(func() {
				sb, err := p.c.Create(ctx, l.shape)
				<-slots
				p.made(ctx, l, sb, err)
			})
		}
	}
}

// made keeps a created sandbox, or destroys it when Run is ending.
func (p *Pool) made(ctx context.Context, l *lane, sb sandbox.Sandbox, err error) {
	p.mu.Lock()
	l.making--
	switch {
	case err != nil:
		l.backoff = min(max(2*l.backoff, time.Second), 30*time.Second)
		l.retryAt = time.Now().Add(l.backoff)
	case p.running && ctx.Err() == nil:
		l.backoff = 0
		l.idle = append(l.idle, waiting{sb: sb, made: time.Now()})
		sb = nil
	}
	retry := l.backoff
	p.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("create waiting sandbox", "profile", l.shape.Profile.Name, "err", err, "retry_in", retry.String())
		}
	} else if sb != nil {
		p.destroy(ctx, sb)
	}
	p.signal()
}

// expire destroys the sandboxes that waited longer than MaxAge; fill replaces them.
func (p *Pool) expire(wg *sync.WaitGroup) {
	p.mu.Lock()
	var old []sandbox.Sandbox
	for _, l := range p.lanes {
		for len(l.idle) > 0 && time.Since(l.idle[0].made) > p.o.MaxAge {
			old = append(old, l.idle[0].sb)
			l.idle = slices.Delete(l.idle, 0, 1)
		}
	}
	p.mu.Unlock()
	for _, sb := range old {
		wg.Go(func() { p.destroy(context.Background(), sb) })
	}
}

// destroy removes a sandbox that no job will use; a failure is the provider's reaper's to finish.
func (p *Pool) destroy(ctx context.Context, sb sandbox.Sandbox) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(dctx); err != nil {
		p.log.Warn("destroy waiting sandbox", "sandbox", sb.ID(), "err", err)
	}
}
