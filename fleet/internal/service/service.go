// Package service gives a process's background work one lifetime contract, as River's startstop
// does for its maintenance services: Start begins a service and returns once it runs, Stop ends
// it and returns once it has ended. Nothing a service starts outlives its Stop.
//
// A [Group] owns several: it starts them in order and stops them in the reverse order, so that
// each stops before what was started ahead of it (the pool its sandboxes come from, say).
package service

import (
	"context"
	"log/slog"
	"sync"
)

// Service is background work with a start and a stop.
type Service interface {
	// Start begins the service and returns once it runs; an error means it did not start and
	// needs no Stop. The service runs until Stop, or until ctx ends.
	Start(ctx context.Context) error
	// Stop ends the service and returns once everything it started has ended. Stopping a service
	// that was not started, or twice, does nothing.
	Stop()
}

// Loop is a Service made of a function that runs until its ctx ends.
type Loop struct {
	name string
	log  *slog.Logger
	run  func(ctx context.Context) error

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewLoop returns the service that runs run. An error run returns is logged under name: the
// other services go on, as a loop's failure (a subscription refused, say) is the loop's.
func NewLoop(name string, log *slog.Logger, run func(ctx context.Context) error) *Loop {
	return &Loop{name: name, log: log, run: run}
}

// Start runs the loop on a goroutine of its own.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, l.stop = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		if err := l.run(ctx); err != nil {
			l.log.Error(l.name, "err", err)
		}
	}()
	return nil
}

// Stop ends the loop's ctx and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// Group is services started in order and stopped in the reverse order. Its zero value is ready.
type Group struct {
	mu      sync.Mutex
	started []Service
}

// Start starts services after those the group started before, one at a time. When one fails,
// every service the group started is stopped and its error returned.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			g.Stop()
			return err
		}
		g.mu.Lock()
		g.started = append(g.started, s)
		g.mu.Unlock()
	}
	return nil
}

// Stop stops the services started, the last one first, each once it returned.
func (g *Group) Stop() {
	g.mu.Lock()
	started := g.started
	g.started = nil
	g.mu.Unlock()
	for i := len(started) - 1; i >= 0; i-- {
		started[i].Stop()
	}
}
