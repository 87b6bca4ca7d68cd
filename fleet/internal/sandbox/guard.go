package sandbox

import (
	"cmp"
	"context"
	"sync/atomic"
	"time"
)

// Guard kills a running sandbox when its wall clock runs out or its run's context ends, and
// remembers which of the two it was. Providers start one per Run.
type Guard struct {
	kill     func()
	timer    *time.Timer
	stopCtx  func() bool
	timedOut atomic.Bool
	killed   atomic.Bool
}

// Watch arms a guard: kill is called after timeout (a minute when zero) or when ctx ends.
func Watch(ctx context.Context, timeout time.Duration, kill func()) *Guard {
	g := &Guard{kill: kill}
	g.timer = time.AfterFunc(cmp.Or(timeout, time.Minute), func() {
		g.timedOut.Store(true)
		kill()
	})
	g.stopCtx = context.AfterFunc(ctx, g.Kill)
	return g
}

// Kill kills the sandbox for a reason other than its timeout (a writer that failed, ctx).
func (g *Guard) Kill() {
	g.killed.Store(true)
	g.kill()
}

// Stop disarms the guard once the sandbox ended.
func (g *Guard) Stop() {
	g.timer.Stop()
	g.stopCtx()
}

// Mark records on exit how the run was ended.
func (g *Guard) Mark(exit *Exit) {
	exit.TimedOut, exit.Killed = g.timedOut.Load(), g.killed.Load()
}
