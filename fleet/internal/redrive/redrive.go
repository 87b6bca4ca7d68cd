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
	"github.com/runfleet/runfleet/fleet/internal/keyspace"
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
	Settlement(ctx context.Context, tenant, id string) (job.Settlement, error)
	Request(ctx context.Context, tenant, id string) (Stored, error)
	Publish(ctx context.Context, queue, tenant string, req job.Request) (duplicate bool, err error)
}

// Lister lists settled jobs (internal/jobindex).
type Lister interface {
	List(ctx context.Context, q job.ListQuery) (job.JobList, error)
}

// Options configure a [Service]. Zero fields take the defaults named.
type Options struct {
	Prefix    string        // Redis key prefix (package keyspace); default job.DefaultPrefix
	Retention time.Duration // how long a run's progress is kept; default a week
	// Worker names this service as the holder of the bulk runs it executes; default a new id.
	Worker string
	// HoldTTL is how long a bulk run stays with a worker that stopped renewing its hold (it
	// died or hangs) before another takes it over; default 15 s.
	HoldTTL time.Duration
	Logger  *slog.Logger
}

// Service redrives jobs, one or many.
type Service struct {
	fleet     Fleet
	list      Lister
	rdb       redis.UniversalClient
	keys      keyspace.Keys
	retention time.Duration
	worker    string
	holdTTL   time.Duration
	log       *slog.Logger
}

// New returns a service that keeps its runs' progress in rdb.
func New(fleet Fleet, list Lister, rdb redis.UniversalClient, o Options) *Service {
	return &Service{fleet: fleet, list: list, rdb: rdb,
		keys:      keyspace.New(o.Prefix),
		retention: cmp.Or(o.Retention, 7*24*time.Hour),
		worker:    cmp.Or(o.Worker, job.NewID()),
		holdTTL:   cmp.Or(o.HoldTTL, 15*time.Second),
		log:       cmp.Or(o.Logger, slog.New(slog.DiscardHandler))}
}

// Redrive publishes r.Tenant's job r.JobID's stored request again as a new job of the same
// tenant, or finds the one an earlier call published.
func (s *Service) Redrive(ctx context.Context, r job.RedriveRequest) (job.Redriven, error) {
	r.Tenant = cmp.Or(r.Tenant, job.DefaultTenant)
	if !job.ValidID(r.JobID) {
		return job.Redriven{}, fmt.Errorf("job %q: %w", r.JobID, job.ErrInvalidID)
	}
	if !job.ValidTenant(r.Tenant) {
		return job.Redriven{}, fmt.Errorf("tenant %q: %w", r.Tenant, job.ErrInvalidTenant)
	}
	st, err := s.fleet.Settlement(ctx, r.Tenant, r.JobID)
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
	stored, err := s.fleet.Request(ctx, r.Tenant, r.JobID)
	if errors.Is(err, runfleet.ErrNotFound) {
		return job.Redriven{}, fmt.Errorf("job %s: its request is no longer kept: %w", r.JobID, ErrNotFound)
	}
	if err != nil {
		return job.Redriven{}, fmt.Errorf("job %s: request: %w", r.JobID, err)
	}
	req := stored.Request
	req.ID, req.RedriveOf, req.Deadline = job.RedriveID(r.JobID), r.JobID, time.Time{}
	dup, err := s.fleet.Publish(ctx, stored.Queue, r.Tenant, req)
	if err != nil {
		return job.Redriven{}, fmt.Errorf("job %s: publish %s: %w", r.JobID, req.ID, err)
	}
	s.log.Info("redriven", "job_id", req.ID, "tenant", r.Tenant, "redrive_of", r.JobID, "duplicate", dup)
	return job.Redriven{JobID: req.ID, RedriveOf: r.JobID, Duplicate: dup}, nil
}

// position is where a bulk run is in its listing: the page's cursor and how many of the page's
// jobs it has done. A run taken over goes on from there.
type position struct {
	Cursor string `json:"cursor,omitempty"`
	Done   int    `json:"done"`
}

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
	run.Worker = s.worker
	body, err := json.Marshal(run)
	if err != nil {
		return job.RedriveRun{}, err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.keys.RedriveRun(run.ID), body, s.retention)
		p.Set(ctx, s.keys.RedriveHold(run.ID), s.worker, s.holdTTL)
		p.SAdd(ctx, s.keys.RedrivesRunning(), run.ID)
		return nil
	})
	if err != nil {
		return job.RedriveRun{}, fmt.Errorf("save redrive run %s: %w", run.ID, err)
	}
	return run, nil
}

// Run returns run id's progress.
func (s *Service) Run(ctx context.Context, id string) (job.RedriveRun, error) {
	b, err := s.rdb.Get(ctx, s.keys.RedriveRun(id)).Bytes()
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
	if err := s.rdb.Set(ctx, s.keys.RedriveStop(id), 1, s.retention).Err(); err != nil {
		return run, fmt.Errorf("stop redrive run %s: %w", id, err)
	}
	return run, nil
}

// Execute redrives the jobs of run, paced, from pos, until they are done or the run is stopped,
// while this service holds the run (Start or adopt took it). When ctx ends (the worker stops) it
// lets go of the run, still running, for another worker to go on with.
func (s *Service) Execute(ctx context.Context, run job.RedriveRun, pos position) {
	q := run.Filter.Query()
	q.Limit, q.Cursor = 100, pos.Cursor
	interval := time.Duration(float64(time.Second) / run.Filter.RatePerS)
	next := time.Now()
	renew := time.NewTicker(s.holdTTL / 3)
	defer renew.Stop()
	for {
		page, err := s.list.List(ctx, q)
		if err != nil {
			s.end(ctx, run, job.RunFailed, err)
			return
		}
		for i, l := range page.Jobs {
			if i < pos.Done {
				continue // done before this worker took the run over
			}
			for wait := true; wait; {
				select {
				case <-time.After(time.Until(next)):
					wait = false
				case <-renew.C:
					if !s.keep(ctx, run, pos) {
						return
					}
				case <-ctx.Done():
					s.end(ctx, run, "", nil)
					return
				}
			}
			next = next.Add(interval)
			_, err := s.Redrive(ctx, job.RedriveRequest{JobID: l.JobID, Tenant: l.Tenant, ConfirmMayHaveRun: run.Filter.ConfirmMayHaveRun})
			switch {
			case err == nil:
				run.Redriven++
			case errors.Is(err, ErrMayHaveRun), errors.Is(err, ErrNotRedrivable):
				run.Skipped++
			case ctx.Err() != nil:
				s.end(ctx, run, "", nil)
				return
			default:
				run.Failed++
				s.log.Warn("redrive", "run", run.ID, "job_id", l.JobID, "err", err)
			}
			run.Updated = time.Now().UTC()
			pos.Done = i + 1
			if !s.keep(ctx, run, pos) {
				return
			}
		}
		if page.Cursor == "" {
			s.end(ctx, run, job.RunDone, nil)
			return
		}
		q.Cursor, pos = page.Cursor, position{Cursor: page.Cursor}
	}
}

// keep saves run's progress and renews its hold, and reports whether to go on: not when another
// worker took the run over, nor when it was asked to stop (then it ends stopped). A failed write
// is logged, and the run goes on: the next write renews the hold.
func (s *Service) keep(ctx context.Context, run job.RedriveRun, pos position) bool {
	held, stopped, err := s.progress(ctx, run, pos)
	switch {
	case err != nil:
		s.log.Warn("save redrive run", "run", run.ID, "err", err)
	case !held:
		s.log.Warn("redrive run taken over by another worker", "run", run.ID)
		return false
	case stopped:
		s.end(ctx, run, job.RunStopped, nil)
		return false
	}
	return true
}

// progress saves run and pos while this service holds the run, and reports whether it still does
// and whether the run was asked to stop, in one round trip.
func (s *Service) progress(ctx context.Context, run job.RedriveRun, pos position) (held, stopped bool, err error) {
	rb, err := json.Marshal(run)
	if err != nil {
		return false, false, err
	}
	pb, err := json.Marshal(pos)
	if err != nil {
		return false, false, err
	}
	n, err := s.keys.HoldRedrive(run.ID, rb, pb, s.worker, s.holdTTL, s.retention).Run(ctx, s.rdb).Int()
	if err != nil {
		return true, false, fmt.Errorf("save redrive run %s: %w", run.ID, err)
	}
	return n >= 0, n == 1, nil
}

// end ends run in state (done, stopped, failed with err), or, with state empty, lets go of it for
// another worker; both only while this service holds it.
func (s *Service) end(ctx context.Context, run job.RedriveRun, state string, err error) {
	if state != "" {
		run.State, run.Updated = state, time.Now().UTC()
		if err != nil {
			run.Error = err.Error()
		}
	}
	rb, merr := json.Marshal(run)
	if merr != nil {
		s.log.Warn("save redrive run", "run", run.ID, "err", merr)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := s.keys.EndRedrive(run.ID, rb, s.worker, s.retention, state).Run(ctx, s.rdb).Err(); serr != nil {
		s.log.Warn("end redrive run", "run", run.ID, "state", state, "err", serr)
	}
	if state == "" {
		s.log.Info("redrive run let go for another worker", "run", run.ID, "redriven", run.Redriven)
	} else {
		s.log.Info("redrive run ended", "run", run.ID, "state", state, "redriven", run.Redriven, "skipped", run.Skipped, "failed", run.Failed)
	}
}

// adopt takes over the bulk runs not ended that no worker holds (the one that ran them died, hung
// or stopped), and returns each with where it was, for [Service.Execute].
func (s *Service) adopt(ctx context.Context) ([]adopted, error) {
	ids, err := s.rdb.SMembers(ctx, s.keys.RedrivesRunning()).Result()
	if err != nil {
		return nil, fmt.Errorf("list redrive runs: %w", err)
	}
	var out []adopted
	for _, id := range ids {
		took, err := s.rdb.SetNX(ctx, s.keys.RedriveHold(id), s.worker, s.holdTTL).Result()
		if err != nil {
			return out, fmt.Errorf("take redrive run %s: %w", id, err)
		}
		if !took {
			continue
		}
		run, err := s.Run(ctx, id)
		if errors.Is(err, ErrNoRun) || err == nil && run.State != job.RunRunning {
			s.rdb.SRem(ctx, s.keys.RedrivesRunning(), id)
			s.rdb.Del(ctx, s.keys.RedriveHold(id))
			continue
		}
		if err != nil {
			s.rdb.Del(ctx, s.keys.RedriveHold(id))
			return out, err
		}
		var pos position
		if b, err := s.rdb.Get(ctx, s.keys.RedrivePos(id)).Bytes(); err == nil {
			_ = json.Unmarshal(b, &pos)
		}
		from := run.Worker
		run.Worker = s.worker
		s.log.Warn("took over a redrive run", "run", id, "from", from, "redriven", run.Redriven)
		out = append(out, adopted{run: run, pos: pos})
	}
	return out, nil
}

// adopted is a bulk run taken over, and where it was.
type adopted struct {
	run job.RedriveRun
	pos position
}
