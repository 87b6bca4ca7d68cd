package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/lease"
)

// heartbeat extends a's lease and tells JetStream the delivery is in progress, a third of a TTL
// apart, until ctx ends: ctx is the attempt's lease, which a cancel or a shutdown does not end,
// so the lease is kept while a stopped job's teardown and settlement run. The trust window is
// watched apart from Redis, by a timer on the monotonic clock: when it closes (Redis silent, slow
// or gone, the process stalled) the lease is lost with errLeaseLost whatever an extend is doing,
// and every extend waits no longer than the window has left.
func (r *Runner) heartbeat(ctx context.Context, a *attempt, log *slog.Logger, lose context.CancelCauseFunc) {
	var lost sync.Once
	leaseLost := func(why string, err error) {
		lost.Do(func() {
			log.Warn("lease lost; stopping the job", "why", why, "err", err)
			r.o.Observer.LeaseLost(a.q)
			lose(errLeaseLost)
		})
	}
	window := time.AfterFunc(max(a.lease.Remaining(), 0), func() {
		if !a.lease.Valid() {
			leaseLost("trust window closed", nil)
		}
	})
	defer window.Stop()

	every := r.leases.TTL() / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		err := a.lease.Extend(ctx)
		took := time.Since(sent)
		if took > every {
			// Redis or this process is slow: a few more and leases are lost.
			log.Warn("extend lease slow", "took", took, "window_left", a.lease.Remaining(), "err", err)
		}
		if err == nil {
			window.Reset(a.lease.Remaining())
			_ = a.m.InProgress()
			// Sends stay a third of a TTL apart: a slow reply does not put the next one off.
			t.Reset(max(every-took, 0))
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, lease.ErrLost) || !a.lease.Valid() {
			leaseLost("extend refused", err)
			return
		}
		log.Warn("extend lease", "err", err, "window_left", a.lease.Remaining())
		t.Reset(min(every, max(a.lease.Remaining()/2, 10*time.Millisecond)))
	}
}
