package redrive

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/reply"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// serveTimeout bounds one answer (a bulk run goes on after its start is answered).
const serveTimeout = 10 * time.Second

// queueGroup spreads requests over the workers: one answers each.
const queueGroup = "runfleet-redrive"

// runID is the body of a request about one bulk run.
type runID struct {
	ID string `json:"id"`
}

// Serve answers redrive requests and takes over the bulk runs of workers that died, until ctx
// ends; then it waits for the answers under way and the bulk runs it executes, which it lets go
// of for another worker.
func (s *Service) Serve(ctx context.Context, nc *nats.Conn, subjects job.Subjects) error {
	var runs sync.WaitGroup
	defer runs.Wait()
	start := func(actx context.Context, b job.BulkRedrive) (job.RedriveRun, error) {
		run, err := s.Start(actx, b, time.Now().UTC())
		if err == nil && !b.DryRun {
			runs.Go(func() { s.Execute(ctx, run, position{}) })
		}
		return run, err
	}
	srv, err := reply.Start(ctx, nc, reply.Config{
		Name:       queueGroup,
		QueueGroup: queueGroup,
		Endpoints: []reply.Endpoint{
			{Name: "redrive", Subject: subjects.Redrive(), Answer: reply.JSON(s.Redrive)},
			{Name: "start", Subject: subjects.RedriveStart(), Answer: reply.JSON(start)},
			{Name: "get", Subject: subjects.RedriveRun(), Answer: reply.JSON(func(ctx context.Context, r runID) (job.RedriveRun, error) {
				return s.Run(ctx, r.ID)
			})},
			{Name: "stop", Subject: subjects.RedriveStop(), Answer: reply.JSON(func(ctx context.Context, r runID) (job.RedriveRun, error) {
				return s.Stop(ctx, r.ID)
			})},
		},
		Timeout:  serveTimeout,
		Classify: classify,
		Log:      s.log,
	})
	if err != nil {
		return err
	}
	// Stopped before runs.Wait: no answer starts a run once the wait begins.
	defer func() {
		if err := srv.Stop(); err != nil {
			s.log.Warn("stop the redrive service", "err", err)
		}
	}()
	adopt := time.NewTicker(s.holdTTL / 3)
	defer adopt.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-adopt.C:
			taken, err := s.adopt(ctx)
			if err != nil {
				s.log.Warn("take over redrive runs", "err", err)
			}
			for _, a := range taken {
				runs.Go(func() { s.Execute(ctx, a.run, a.pos) })
			}
		}
	}
}

// classify maps an error to the service's answer; the detail of a 500 stays in the worker's log.
func classify(err error) *protocol.ServiceError {
	se := &protocol.ServiceError{Message: err.Error()}
	switch {
	case errors.Is(err, job.ErrInvalidQuery), errors.Is(err, job.ErrInvalidID):
		se.Code, se.Reason = 400, protocol.ReasonInvalidQuery // as the list route names a bad filter (docs/protocol.md)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoRun):
		se.Code, se.Reason = 404, protocol.ReasonNotFound
	case errors.Is(err, ErrNotSettled):
		se.Code, se.Reason = 409, protocol.ReasonNotSettled
	case errors.Is(err, ErrNotRedrivable):
		se.Code, se.Reason = 409, protocol.ReasonNotRedrivable
	case errors.Is(err, ErrMayHaveRun):
		se.Code, se.Reason = 409, protocol.ReasonMayHaveRun
	default:
		se.Code, se.Reason, se.Message = 500, protocol.ReasonUnavailable, "the redrive service is unavailable"
	}
	return se
}
