package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/lease"
)

// durability is whether reservations can be acknowledged by as many Redis replicas as the lease
// store asks (lease.ErrNotReplicated). While they cannot, a job's reservation is not the job's
// failure but the fleet's: the claim loops wait, the job is released without counting a failure
// and waits in its stream, and the watch resumes claiming once the replicas are back.
type durability struct {
	mu    sync.Mutex
	met   chan struct{} // closed while met
	cause error         // why not, while not
}

func newDurability() *durability {
	met := make(chan struct{})
	close(met)
	return &durability{met: met}
}

// unmet records cause and reports whether durability was met until now.
func (d *durability) unmet(cause error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.cause == nil
	if was {
		d.met = make(chan struct{})
	}
	d.cause = cause
	return was
}

// restored reports whether durability was unmet until now.
func (d *durability) restored() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cause == nil {
		return false
	}
	d.cause = nil
	close(d.met)
	return true
}

func (d *durability) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cause
}

// wait returns once durability is met, or ctx's error.
func (d *durability) wait(ctx context.Context) error {
	d.mu.Lock()
	met := d.met
	d.mu.Unlock()
	select {
	case <-met:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// durabilityProbe is how often the watch asks for the replicas while they are missing.
const durabilityProbe = time.Second

// Durability says why the worker claims nothing now: too few Redis replicas acknowledge the
// reservations (an error wrapping lease.ErrNotReplicated); nil while it claims, and always with
// Options.DispatchWithoutReplica. A worker is ready only when it is nil.
func (r *Runner) Durability() error {
	if r.o.DispatchWithoutReplica {
		return nil
	}
	return r.durable.err()
}

// DurabilityUnmet reports whether too few replicas acknowledge the reservations now, whether
// or not the worker goes on without them.
func (r *Runner) DurabilityUnmet() bool { return r.durable.err() != nil }

// notReplicated records that a reservation found too few replicas.
func (r *Runner) notReplicated(cause error) {
	if !r.durable.unmet(cause) {
		return
	}
	if r.o.DispatchWithoutReplica {
		r.log.Warn("too few redis replicas acknowledge the reservations: dispatching without them (--dispatch-without-replica); a failover now may lose a reservation, and the dispatch gate alone keeps its job from running twice", "err", cause)
		return
	}
	r.log.Warn("too few redis replicas acknowledge the reservations: claiming no job until they do; jobs wait in their streams", "err", cause)
}

// watchDurability asks the lease store for its replicas at start and, while too few are in sync,
// every durabilityProbe, until ctx ends.
func (r *Runner) watchDurability(ctx context.Context) {
	probe := func() {
		err := r.leases.Replicated(ctx)
		switch {
		case err == nil:
			if r.durable.restored() {
				r.log.Info("redis replicas acknowledge the reservations again: claiming")
			}
		case errors.Is(err, lease.ErrNotReplicated):
			r.notReplicated(err)
		}
		// Any other error (Redis does not answer) changes nothing: the claims say more.
	}
	probe()
	t := time.NewTicker(durabilityProbe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.durable.err() != nil {
				probe()
			}
		}
	}
}
