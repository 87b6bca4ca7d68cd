package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
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
// ends; then it waits for the bulk runs it executes, which it lets go of for another worker.
func (s *Service) Serve(ctx context.Context, nc *nats.Conn, subjects job.Subjects) error {
	msgs := make(chan *nats.Msg, 64)
	for _, subj := range []string{subjects.Redrive(), subjects.RedriveStart(), subjects.RedriveRun(), subjects.RedriveStop()} {
		sub, err := nc.ChanQueueSubscribe(subj, queueGroup, msgs)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subj, err)
		}
		defer sub.Unsubscribe()
	}
	var runs sync.WaitGroup
	defer runs.Wait()
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
		case m := <-msgs:
			if err := s.answer(ctx, subjects, m, &runs); err != nil {
				s.log.Warn("answer a redrive request", "subject", m.Subject, "err", err)
			}
		}
	}
}

func (s *Service) answer(ctx context.Context, subjects job.Subjects, m *nats.Msg, runs *sync.WaitGroup) error {
	actx, cancel := context.WithTimeout(ctx, serveTimeout)
	defer cancel()
	var out any
	var err error
	switch m.Subject {
	case subjects.Redrive():
		var r job.RedriveRequest
		if err = decode(m.Data, &r); err == nil {
			out, err = s.Redrive(actx, r)
		}
	case subjects.RedriveStart():
		var b job.BulkRedrive
		if err = decode(m.Data, &b); err == nil {
			var run job.RedriveRun
			run, err = s.Start(actx, b, time.Now().UTC())
			if err == nil && !b.DryRun {
				runs.Go(func() { s.Execute(ctx, run, position{}) })
			}
			out = run
		}
	case subjects.RedriveRun(), subjects.RedriveStop():
		var r runID
		if err = decode(m.Data, &r); err == nil {
			if m.Subject == subjects.RedriveStop() {
				out, err = s.Stop(actx, r.ID)
			} else {
				out, err = s.Run(actx, r.ID)
			}
		}
	}
	if err != nil {
		code, reason := classify(err)
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Nats-Service-Error", err.Error())
		r.Header.Set("Nats-Service-Error-Code", fmt.Sprint(code))
		r.Header.Set("Runfleet-Reason", reason)
		if rerr := m.RespondMsg(r); rerr != nil {
			return rerr
		}
		if code >= 500 {
			return err
		}
		return nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return m.Respond(b)
}

func decode(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", job.ErrInvalidQuery, err)
	}
	return nil
}

// classify maps an error to a status code and a reason of the service's answer.
func classify(err error) (int, string) {
	switch {
	case errors.Is(err, job.ErrInvalidQuery), errors.Is(err, job.ErrInvalidID):
		return 400, "invalid_query" // as the list route names a bad filter (docs/protocol.md)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoRun):
		return 404, job.RedriveNotFound
	case errors.Is(err, ErrNotSettled):
		return 409, job.RedriveNotSettled
	case errors.Is(err, ErrNotRedrivable):
		return 409, job.RedriveNotRedrivable
	case errors.Is(err, ErrMayHaveRun):
		return 409, job.RedriveMayHaveRun
	}
	return 500, "unavailable"
}
