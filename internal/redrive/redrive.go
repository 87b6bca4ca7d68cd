package redrive

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// Errors of a redrive, each with the reason the service answers with.
var (
	ErrNotFound      = errors.New("no such job")
	ErrNotSettled    = errors.New("the job has not settled")
	ErrNotRedrivable = errors.New("a succeeded or rejected job is never redriven")
	ErrMayHaveRun    = errors.New("the job settled unknown, its code may have run: confirm to redrive it")
	ErrNoRun         = errors.New("no such redrive run")
)

// Stored is a job's request as the jobs stream keeps it, with the queue and tenant of its subject.
type Stored struct {
	Queue, Tenant string
	Request       job.Request
}

// Fleet reads what a redrive needs and publishes the new job. Publish reports a duplicate when
// the jobs stream already holds the id.
type Fleet interface {
	Settlement(ctx context.Context, id string) (job.Settlement, error)
	Request(ctx context.Context, id string) (Stored, error)
	Publish(ctx context.Context, queue, tenant string, req job.Request) (duplicate bool, err error)
}

// Lister lists settled jobs (internal/jobindex).
type Lister interface {
	List(ctx context.Context, q job.ListQuery) (job.JobList, error)
}

// Options configure a [Service]. Zero fields take the defaults named.
type Options struct {
	Prefix    string        // Redis key prefix; default job.DefaultPrefix
	Retention time.Duration // how long a run's progress is kept; default a week
	Logger    *slog.Logger
}

// Service redrives jobs, one or many.
type Service struct {
	fleet     Fleet
	list      Lister
	rdb       redis.UniversalClient
	tag       string
	retention time.Duration
	log       *slog.Logger
}

// New returns a service that keeps its runs' progress in rdb.
func New(fleet Fleet, list Lister, rdb redis.UniversalClient, o Options) *Service {
	return &Service{fleet: fleet, list: list, rdb: rdb,
		tag:       "{" + cmp.Or(o.Prefix, job.DefaultPrefix) + ":index}",
		retention: cmp.Or(o.Retention, 7*24*time.Hour),
		log:       cmp.Or(o.Logger, slog.New(slog.DiscardHandler))}
}

// Redrive publishes job r.JobID's stored request again as a new job, or finds the one an earlier
// call published.
func (s *Service) Redrive(ctx context.Context, r job.RedriveRequest) (job.Redriven, error) {
	if !job.ValidID(r.JobID) {
		return job.Redriven{}, fmt.Errorf("job %q: %w", r.JobID, job.ErrInvalidID)
	}
	st, err := s.fleet.Settlement(ctx, r.JobID)
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement):
		return job.Redriven{}, fmt.Errorf("job %s: %w", r.JobID, ErrNotSettled)
	case errors.Is(err, runfleet.ErrNotFound), errors.Is(err, runfleet.ErrExpired):
		return job.Redriven{}, fmt.Errorf("job %s: %w", r.JobID, ErrNotFound)
	case err != nil:
		return job.Redriven{}, fmt.Errorf("job %s: settlement: %w", r.JobID, err)
	case !st.Status.Redrivable():
		return job.Redriven{}, fmt.Errorf("job %s %s: %w", r.JobID, st.Status, ErrNotRedrivable)
	case st.Status == job.StatusUnknown && !r.ConfirmMayHaveRun:
		return job.Redriven{}, fmt.Errorf("job %s: %w", r.JobID, ErrMayHaveRun)
	}
	stored, err := s.fleet.Request(ctx, r.JobID)
	if errors.Is(err, runfleet.ErrNotFound) {
		return job.Redriven{}, fmt.Errorf("job %s: its request is no longer kept: %w", r.JobID, ErrNotFound)
	}
	if err != nil {
		return job.Redriven{}, fmt.Errorf("job %s: request: %w", r.JobID, err)
	}
	req := stored.Request
	req.ID, req.RedriveOf, req.Deadline = job.RedriveID(r.JobID), r.JobID, time.Time{}
	dup, err := s.fleet.Publish(ctx, stored.Queue, stored.Tenant, req)
	if err != nil {
		return job.Redriven{}, fmt.Errorf("job %s: publish %s: %w", r.JobID, req.ID, err)
	}
	s.log.Info("redriven", "job_id", req.ID, "redrive_of", r.JobID, "duplicate", dup)
	return job.Redriven{JobID: req.ID, RedriveOf: r.JobID, Duplicate: dup}, nil
}

func (s *Service) runKey(id string) string  { return s.tag + ":redrive:" + id }
func (s *Service) stopKey(id string) string { return s.tag + ":redrive:" + id + ":stop" }

// Start counts the jobs b selects and, unless b.DryRun, records a run for [Service.Execute].
func (s *Service) Start(ctx context.Context, b job.BulkRedrive, now time.Time) (job.RedriveRun, error) {
	if b.RatePerS < 0 {
		return job.RedriveRun{}, fmt.Errorf("%w: rate_per_s %v", job.ErrInvalidQuery, b.RatePerS)
	}
	b.RatePerS = cmp.Or(b.RatePerS, job.DefaultRedriveRate)
	if b.Until.IsZero() {
		b.Until = now
	}
	q := b.Query()
	q.Limit, q.Count = 1, true
	l, err := s.list.List(ctx, q)
	if err != nil {
		return job.RedriveRun{}, err
	}
	run := job.RedriveRun{ID: job.NewID(), State: job.RunRunning, Filter: b, Total: *l.Count, Started: now, Updated: now}
	if b.DryRun {
		run.ID, run.State = "", job.RunDone
		return run, nil
	}
	return run, s.save(ctx, run)
}

func (s *Service) save(ctx context.Context, run job.RedriveRun) error {
	b, err := json.Marshal(run)
	if err != nil {
		return err
	}
	if err := s.rdb.Set(ctx, s.runKey(run.ID), b, s.retention).Err(); err != nil {
		return fmt.Errorf("save redrive run %s: %w", run.ID, err)
	}
	return nil
}

// Run returns run id's progress.
func (s *Service) Run(ctx context.Context, id string) (job.RedriveRun, error) {
	b, err := s.rdb.Get(ctx, s.runKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return job.RedriveRun{}, fmt.Errorf("run %q: %w", id, ErrNoRun)
	}
	if err != nil {
		return job.RedriveRun{}, fmt.Errorf("read redrive run %s: %w", id, err)
	}
	var run job.RedriveRun
	if err := json.Unmarshal(b, &run); err != nil {
		return job.RedriveRun{}, fmt.Errorf("read redrive run %s: %w", id, err)
	}
	return run, nil
}

// Stop asks run id to stop; the worker running it stops before its next job.
func (s *Service) Stop(ctx context.Context, id string) (job.RedriveRun, error) {
	run, err := s.Run(ctx, id)
	if err != nil {
		return run, err
	}
	if err := s.rdb.Set(ctx, s.stopKey(id), 1, s.retention).Err(); err != nil {
		return run, fmt.Errorf("stop redrive run %s: %w", id, err)
	}
	return run, nil
}

// Execute redrives the jobs of run, paced, until they are done, the run is stopped, or ctx ends
// (the run is then left stopped). It returns the run as last saved.
func (s *Service) Execute(ctx context.Context, run job.RedriveRun) job.RedriveRun {
	q := run.Filter.Query()
	q.Limit = 100
	interval := time.Duration(float64(time.Second) / run.Filter.RatePerS)
	next := time.Now()
	finish := func(state string, err error) job.RedriveRun {
		run.State, run.Updated = state, time.Now().UTC()
		if err != nil {
			run.Error = err.Error()
		}
		if serr := s.save(context.WithoutCancel(ctx), run); serr != nil {
			s.log.Warn("save redrive run", "run", run.ID, "err", serr)
		}
		return run
	}
	for {
		page, err := s.list.List(ctx, q)
		if err != nil {
			return finish(cmp.Or(ctxState(ctx), job.RunFailed), err)
		}
		for _, l := range page.Jobs {
			select {
			case <-time.After(time.Until(next)):
			case <-ctx.Done():
				return finish(job.RunStopped, nil)
			}
			next = next.Add(interval)
			_, err := s.Redrive(ctx, job.RedriveRequest{JobID: l.JobID, ConfirmMayHaveRun: run.Filter.ConfirmMayHaveRun})
			switch {
			case err == nil:
				run.Redriven++
			case errors.Is(err, ErrMayHaveRun), errors.Is(err, ErrNotRedrivable):
				run.Skipped++
			case ctx.Err() != nil:
				return finish(job.RunStopped, nil)
			default:
				run.Failed++
				s.log.Warn("redrive", "run", run.ID, "job_id", l.JobID, "err", err)
			}
			run.Updated = time.Now().UTC()
			stopped, err := s.progress(ctx, run)
			if err != nil {
				s.log.Warn("save redrive run", "run", run.ID, "err", err)
			}
			if stopped {
				return finish(job.RunStopped, nil)
			}
		}
		if page.Cursor == "" {
			return finish(job.RunDone, nil)
		}
		q.Cursor = page.Cursor
	}
}

func ctxState(ctx context.Context) string {
	if ctx.Err() != nil {
		return job.RunStopped
	}
	return ""
}

// progress saves run and reports whether it was asked to stop, in one round trip.
func (s *Service) progress(ctx context.Context, run job.RedriveRun) (stopped bool, err error) {
	b, err := json.Marshal(run)
	if err != nil {
		return false, err
	}
	var stop *redis.IntCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.runKey(run.ID), b, s.retention)
		stop = p.Exists(ctx, s.stopKey(run.ID))
		return nil
	})
	if err != nil {
		return false, err
	}
	return stop.Val() == 1, nil
}
