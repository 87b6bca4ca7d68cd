package runner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// settleCtx is the settle budget of a job whose own context may have ended (a cancel, a
// shutdown): it derives from leaseCtx, which outlives both on purpose and ends at once when the
// lease is lost, so that a worker without a lease neither stores nor retries anything more.
func (r *Runner) settleCtx(leaseCtx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(leaseCtx, r.o.SettleWait)
}

// settleUndispatched settles a job this attempt does not dispatch: rejected, expired, cancelled
// before start, error, or unknown after an earlier attempt's dispatch. Its counts are what
// earlier attempts stored (G4), read and fenced by [queue.Results.Resume]: should a stale attempt
// store more in between, the settlement is refused and counted again.
func (r *Runner) settleUndispatched(leaseCtx context.Context, a *attempt, status job.Status, reason job.Reason, detail string) {
	sctx, cancel := r.settleCtx(leaseCtx)
	defer cancel()
	var err error
	for range 3 {
		chain, stored, rerr := r.results.Resume(sctx, a.tenant, a.id, a.base.Attempt, a.trace)
		if rerr != nil {
			err = rerr
			break
		}
		if stored.Settled {
			r.adoptSettlement(sctx, a)
			return
		}
		st := a.base
		st.Status, st.Reason, st.Detail = status, reason, detail
		st.Pages, st.StdoutBytes, st.StderrBytes = stored.Pages, stored.StdoutBytes, stored.StderrBytes
		st.SettledAt = time.Now().UTC()
		// Only an earlier attempt that dispatched can have stored artifacts, and then this one
		// settles unknown: what it stored is listed by no settlement.
		lost := status == job.StatusUnknown
		if lost {
			if err = r.sweep(sctx, a, st); err != nil {
				break
			}
		}
		if err = chain.Settle(sctx, st); err == nil {
			if lost {
				r.forget(sctx, a)
			}
			r.stored(sctx, a, st, 0)
			return
		}
		if !errors.Is(err, queue.ErrConflict) {
			break
		}
	}
	a.log.Error("store settlement", "status", status, "err", err)
	_ = a.m.NakWithDelay(time.Second)
}

// settleChain stores the settlement of a job this attempt dispatched, as the last write of its
// result chain.
func (r *Runner) settleChain(ctx context.Context, a *attempt, chain *queue.Chain, st job.Settlement) {
	// This attempt dispatched the job, so no other one stored artifacts: the sweep removes what
	// this one put and does not list (a put that failed half way).
	collected := len(a.outputs) > 0
	if collected {
		if err := r.sweep(ctx, a, st); err != nil {
			a.log.Error("remove unlisted artifacts; leaving the job for redelivery", "err", err)
			return
		}
	}
	err := chain.Settle(ctx, st)
	if errors.Is(err, queue.ErrConflict) {
		a.log.Warn("settled by another attempt; storing nothing more")
		if collected {
			st.Artifacts = nil
			if err := r.sweep(ctx, a, st); err != nil {
				a.log.Warn("remove this attempt's artifacts", "err", err)
			}
		}
		r.adoptSettlement(ctx, a)
		return
	}
	if err != nil {
		a.log.Error("store settlement; leaving the job for redelivery", "err", err)
		return
	}
	if collected {
		r.forget(ctx, a)
	}
	r.stored(ctx, a, st, st.FinishedAt.Sub(st.StartedAt))
}

// adoptSettlement acks a job whose settlement another attempt stored first.
func (r *Runner) adoptSettlement(ctx context.Context, a *attempt) {
	prev, err := r.results.Settlement(ctx, a.tenant, a.id)
	if err != nil {
		a.log.Error("read stored settlement", "err", err)
		_ = a.m.NakWithDelay(time.Second)
		return
	}
	if a.resubmitted(prev) {
		r.refuseResubmitted(ctx, a, prev)
		return
	}
	a.log.Info("settled by an earlier attempt", "status", prev.Status, "by_attempt", prev.Attempt)
	// The attempt that stored it may have died before it listed it.
	r.index(ctx, a, prev)
	a.stopHeartbeat()
	if err := r.leases.Adopt(ctx, a.tenant, a.id, string(prev.Status), a.lease); err != nil {
		a.log.Warn("record settlement", "err", err)
	}
	_ = a.m.DoubleAck(ctx)
}

// stored finishes a job whose settlement is stored: record it, ack the message. A lease lost
// in between does not undo the stored settlement: the record adopts it.
func (r *Runner) stored(ctx context.Context, a *attempt, st job.Settlement, run time.Duration) {
	code := -1
	if st.ExitCode != nil {
		code = *st.ExitCode
	}
	a.log.Info("settled", "status", st.Status, "reason", st.Reason, "exit_code", code,
		"pages", st.Pages, "stdout_bytes", st.StdoutBytes, "stderr_bytes", st.StderrBytes)
	r.phase("settled")
	a.stopHeartbeat()
	err := a.lease.Settled(ctx, string(st.Status))
	if errors.Is(err, lease.ErrLost) {
		err = r.leases.Adopt(ctx, a.tenant, a.id, string(st.Status), a.lease)
	}
	if err != nil {
		a.log.Warn("record settlement", "err", err)
	}
	r.index(ctx, a, st)
	if r.o.Usage != nil {
		if err := r.o.Usage.Kept(ctx, a.tenant, st.SettledAt, int64(len(a.m.Data()))); err != nil {
			a.log.Warn("count the tenant's kept job", "err", err)
		}
	}
	if err := a.m.DoubleAck(ctx); err != nil {
		a.log.Warn("ack", "err", err)
	}
	var cpu time.Duration
	if st.Usage != nil && st.Usage.CPUMS != nil {
		cpu = time.Duration(*st.Usage.CPUMS) * time.Millisecond
		a.cpuMS = *st.Usage.CPUMS
	}
	r.o.Observer.Settled(a.q, a.tenant, st.Status, st.Reason, run, time.Since(a.base.QueuedAt), cpu)
}

// index lists a stored settlement. A row lost here is missing from lists until a repair: the
// settlement itself stands.
func (r *Runner) index(ctx context.Context, a *attempt, st job.Settlement) {
	if r.o.Index == nil {
		return
	}
	if err := r.o.Index.Add(ctx, job.ListedOf(a.q, a.tenant, st)); err != nil {
		a.log.Warn("list the settled job", "err", err)
	}
}

// peekRedriveOf reads a request's redrive_of, or "" when it has no valid one.
func peekRedriveOf(body []byte) string {
	var peek struct {
		RedriveOf string `json:"redrive_of"`
	}
	if json.Unmarshal(body, &peek) != nil || !job.ValidID(peek.RedriveOf) {
		return ""
	}
	return peek.RedriveOf
}

// release gives up a job before dispatch, counting a failure, and asks for redelivery after a
// backoff. A job out of tries settles error. The release is retried for the settle budget while
// Redis does not answer; once the lease ran out it is refused (lease.Release), and the job's next
// claim finds its record in doubt and asks the dispatch gate, which runs a job no attempt
// dispatched.
func (r *Runner) release(leaseCtx context.Context, a *attempt, cause error) {
	failures, ok := r.giveUp(leaseCtx, a, cause, true)
	if !ok {
		return
	}
	a.log.Warn("pre-dispatch failure", "err", cause, "failures", failures)
	_ = a.m.NakWithDelay(min(time.Duration(1<<min(failures, 6))*100*time.Millisecond, 10*time.Second))
}

// releaseUncounted gives up a job before dispatch for a cause that is not the job's (too few
// replicas), and leaves it to wait in its stream.
func (r *Runner) releaseUncounted(leaseCtx context.Context, a *attempt, cause error) {
	if _, ok := r.giveUp(leaseCtx, a, cause, false); !ok {
		return
	}
	a.log.Info("released undispatched; the job waits", "cause", cause)
	_ = a.m.NakWithDelay(durabilityProbe)
}

// giveUp releases a's lease, counting a failure when failed, and reports the failures counted
// and whether it was released.
func (r *Runner) giveUp(leaseCtx context.Context, a *attempt, cause error, failed bool) (int, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(leaseCtx), r.o.SettleWait)
	defer cancel()
	a.stopHeartbeat()
	failures, err := a.lease.Release(ctx, failed)
	for wait := 100 * time.Millisecond; err != nil && !errors.Is(err, lease.ErrLost) && ctx.Err() == nil; wait = min(2*wait, 2*time.Second) {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			failures, err = a.lease.Release(ctx, failed)
		}
	}
	switch {
	case errors.Is(err, lease.ErrLost):
		a.log.Warn("lease lost before dispatch", "err", err, "cause", cause)
		return 0, false
	case err != nil:
		a.log.Error("release; the next claim finds the reservation and asks the dispatch marker", "err", err, "cause", cause)
		return 0, false
	}
	return failures, true
}

func usage(u sandbox.Usage) *job.Usage {
	out := &job.Usage{WallMS: u.Wall.Milliseconds()}
	if u.CPU != nil {
		ms := u.CPU.Milliseconds()
		out.CPUMS = &ms
	}
	out.MaxRSSBytes = u.MaxRSS
	return out
}
