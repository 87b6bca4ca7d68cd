package runner

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/job"
)

// attempt is one delivery of one job.
type attempt struct {
	q      string
	tenant string
	// share is the job's part of its tenant's fair share, done when the attempt ends with the
	// CPU milliseconds its settlement says were measured (cpuMS, -1 when none were).
	share *fairshare.Job
	cpuMS int64
	m     jetstream.Msg
	meta  *jetstream.MsgMetadata
	id    string
	trace string
	// log is read and rewritten by the attempt's own goroutine only; the heartbeat logs with the
	// logger it was started with.
	log   *slog.Logger
	lease *lease.Lease
	base  job.Settlement // fields every settlement of this attempt carries

	outputs []string // the request's, kept as artifacts after the program ends
	// artifactsCut is why collect stored less than the job's own bounds allow: its tenant's
	// max_artifact_bytes left too little room.
	artifactsCut job.Reason
	// stopHeartbeat stops the heartbeat and waits for it; the holder calls it before it gives its
	// lease up (settled, released), so that no extend races the end of the lease.
	stopHeartbeat func()
}

// destroyWait bounds a sandbox's destroy, which runs on a context of its own: however the job
// ended (a lease lost, a shutdown), its sandbox is destroyed at once, not left to the reaper.
const destroyWait = 30 * time.Second

func destroy(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyWait)
	defer cancel()
	return sb.Destroy(ctx)
}

func (r *Runner) handle(runCtx context.Context, q string, src *queue.Source, m jetstream.Msg, share *fairshare.Job) {
	meta, err := m.Metadata()
	if err != nil {
		r.log.Error("message without metadata", "queue", q, "err", err)
		_ = m.Term()
		return
	}
	j, rej := queue.ParseJob(r.subjects, m)
	if rej != nil {
		r.reject(runCtx, q, m, meta, *rej)
		return
	}
	id := j.ID
	a := &attempt{q: q, tenant: j.Tenant, share: share, cpuMS: -1, m: m, meta: meta, id: id, trace: m.Headers().Get(job.HeaderTraceparent),
		log: r.log.With("job_id", id, "tenant", j.Tenant, "queue", q, "delivery", meta.NumDelivered)}
	a.base = job.Settlement{JobID: id, Worker: r.o.Worker, Provider: r.provider.Name(), QueuedAt: meta.Timestamp.UTC()}
	defer func() { share.Done(runCtx, a.cpuMS) }()
	runCtx, span := traceProcess(runCtx, a)
	defer span.End()

	// leaseCtx ends only when the lease is lost. The job's context jctx ends too on a cancel or a
	// shutdown, which stop the program; the heartbeat, the teardown (collect, destroy) and the
	// settlement run under leaseCtx, so that they keep the lease for as long as they take.
	leaseCtx, loseLease := context.WithCancelCause(context.WithoutCancel(runCtx))
	defer loseLease(nil)
	jctx, cancel := context.WithCancelCause(leaseCtx)
	defer cancel(nil)
	stopKill := context.AfterFunc(runCtx, func() { cancel(context.Cause(runCtx)) })
	defer stopKill()
	r.cancels.add(a, cancel)
	defer r.cancels.remove(a)

	if src.History(meta) && r.settledBefore(jctx, a) {
		return
	}
	cctx, claimSpan := step(jctx, "claim")
	claim, err := r.leases.Claim(cctx, a.tenant, id, r.o.Worker, lease.Delivery{Count: src.Deliveries(meta), QueuedAt: meta.Timestamp, Subject: m.Subject()})
	tracing.End(claimSpan, err)
	if err != nil {
		a.log.Error("claim", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	r.o.Observer.Claimed(q, meta.NumDelivered > 1)
	switch claim.Mode {
	case lease.ModeSettled:
		prev, err := r.results.Settlement(jctx, a.tenant, id)
		switch {
		case errors.Is(err, queue.ErrNotSettled):
			// The record outlived the settlement, which outlives the request it settled: this
			// request is another.
			r.refuseResubmitted(runCtx, a, job.Settlement{Status: job.Status(claim.Status)})
		case err != nil:
			a.log.Warn("read settlement", "err", err)
			_ = m.NakWithDelay(time.Second)
		case a.resubmitted(prev):
			r.refuseResubmitted(runCtx, a, prev)
		default:
			a.log.Info("already settled; acking redelivery", "status", claim.Status)
			_ = m.DoubleAck(jctx)
		}
		return
	case lease.ModeHeld:
		a.log.Debug("held by another worker")
		_ = m.NakWithDelay(r.leases.TTL())
		return
	case lease.ModeForeign:
		r.reject(runCtx, q, m, meta, job.Rejection{Subject: m.Subject(), Reason: job.ReasonDuplicateID,
			Detail: "job id " + id + " was first claimed from " + claim.Subject})
		return
	}
	a.lease = claim.Lease
	a.base.Attempt = claim.Lease.Generation()
	a.log = a.log.With("attempt", a.base.Attempt)
	a.log.Debug("claimed", "mode", claim.Mode)
	r.phase("claimed")

	var hb sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(leaseCtx)
	log := a.log
	hb.Go(func() { r.heartbeat(hbCtx, a, log, loseLease) })
	a.stopHeartbeat = sync.OnceFunc(func() {
		stopHB()
		hb.Wait()
	})
	defer a.stopHeartbeat()

	if claim.Mode == lease.ModeUnknown || claim.Mode == lease.ModeRecordLost {
		if r.settledBefore(leaseCtx, a) {
			return
		}
		// Never decoded in full: its settlement still says what it redrove.
		a.base.RedriveOf = peekRedriveOf(a.m.Data())
	}
	if claim.Mode == lease.ModeUnknown || claim.Mode == lease.ModeRecordLost {
		// Redis says the job may have run. Only an attempt that stored the job's dispatch marker
		// may have: with none stored nothing ran, and the gate before this attempt's dispatch
		// decides between it and any earlier attempt still alive. (Reading, not storing, here: a
		// marker stored now and followed by a release before dispatch would make the next
		// attempt settle unknown a job nothing ran.)
		gctx, cancel := context.WithTimeout(leaseCtx, r.o.SettleWait)
		by, passed, err := r.results.GateHolder(gctx, a.tenant, a.id, a.meta.Timestamp)
		cancel()
		switch {
		case err != nil:
			// Nothing decided: the record stays in doubt, and the next delivery asks again.
			a.log.Warn("dispatch marker", "err", err)
			_ = a.m.NakWithDelay(time.Second)
			return
		case passed && claim.Mode == lease.ModeUnknown:
			r.settleUndispatched(leaseCtx, a, job.StatusUnknown, job.ReasonOutcomeLost, fmt.Sprintf("attempt %d dispatched the job and its outcome was lost", by))
			return
		case passed:
			r.settleUndispatched(leaseCtx, a, job.StatusUnknown, job.ReasonRecordLost, fmt.Sprintf("the job's record was lost after attempt %d dispatched it", by))
			return
		}
		if err := a.lease.Clear(leaseCtx); err != nil {
			a.log.Warn("clear record in doubt", "err", err)
			_ = a.m.NakWithDelay(time.Second)
			return
		}
		a.log.Info("no earlier attempt reached a sandbox: running", "mode", claim.Mode)
	}
	r.run(jctx, leaseCtx, a, claim.Failures)
}

// settledBefore reports whether job a already settled, by one read of its settlement subject,
// and if so records the settlement and acks the message. The jobs stream keeps requests long
// after they settled: one delivered again (a consumer made again, a Redis that lost its records)
// must neither run nor settle unknown. A read that fails says no: the claim decides then.
func (r *Runner) settledBefore(ctx context.Context, a *attempt) bool {
	prev, err := r.results.Settlement(ctx, a.tenant, a.id)
	if err != nil {
		if !errors.Is(err, queue.ErrNotSettled) {
			a.log.Warn("read settlement", "err", err)
		}
		return false
	}
	if a.resubmitted(prev) {
		r.refuseResubmitted(ctx, a, prev)
		return true
	}
	a.log.Info("settled before; acking a kept request delivered again", "status", prev.Status, "by_attempt", prev.Attempt)
	if a.stopHeartbeat != nil {
		a.stopHeartbeat()
	}
	if err := r.leases.Adopt(ctx, a.tenant, a.id, string(prev.Status), a.lease); err != nil {
		a.log.Warn("record settlement", "err", err)
	}
	_ = a.m.DoubleAck(ctx)
	return true
}

// resubmitted reports whether prev, job a's stored settlement, settled another request than a's:
// the id was submitted again once its first request left the jobs stream, while its record and
// settlement were kept (they outlive the request by the job's queue time). A settlement without
// queued_at (an early version's) is taken for a's own.
func (a *attempt) resubmitted(prev job.Settlement) bool {
	return !prev.QueuedAt.IsZero() && !prev.QueuedAt.Equal(a.meta.Timestamp)
}

// refuseResubmitted refuses a's request, whose id settled for an earlier request (prev): it is
// recorded as a rejection and deleted, never acked as if it had settled. An id is taken for as
// long as its settlement is kept.
func (r *Runner) refuseResubmitted(ctx context.Context, a *attempt, prev job.Settlement) {
	if a.stopHeartbeat != nil {
		a.stopHeartbeat()
	}
	a.log.Warn("job id settled for an earlier request; refusing this one as a duplicate", "status", prev.Status, "queued_at", prev.QueuedAt)
	r.reject(ctx, a.q, a.m, a.meta, job.Rejection{Subject: a.m.Subject(), Reason: job.ReasonDuplicateID,
		Detail: "job id " + a.id + " already settled " + string(prev.Status) + " for an earlier request; an id stays taken while its settlement is kept"})
}

// reject records rec for a job message no settlement subject can name, then deletes it from the
// jobs stream, where it would otherwise be kept and found by a lookup of its id.
func (r *Runner) reject(ctx context.Context, q string, m jetstream.Msg, meta *jetstream.MsgMetadata, rec job.Rejection) {
	rec.StreamSeq = meta.Sequence.Stream
	if err := r.results.Reject(ctx, rec); err != nil {
		r.log.Error("record rejection", "queue", q, "stream_seq", rec.StreamSeq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := r.results.Remove(ctx, rec.StreamSeq); err != nil {
		r.log.Error("remove rejected message", "queue", q, "stream_seq", rec.StreamSeq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	r.log.Info("rejected job message", "queue", q, "stream_seq", rec.StreamSeq, "subject", rec.Subject, "reason", rec.Reason)
	tenant := job.DefaultTenant
	if _, t, _, err := r.subjects.ParseJob(m.Subject()); err == nil {
		tenant = t
	}
	r.o.Observer.Settled(q, tenant, job.StatusRejected, rec.Reason, 0, 0, 0)
	_ = m.DoubleAck(ctx)
}

// run lives the job's life from its request to its settlement. ctx is the job's context;
// leaseCtx, which outlives a cancel and a shutdown, bounds what follows the program's end.
func (r *Runner) run(ctx, leaseCtx context.Context, a *attempt, failures int) {
	if h := job.ReservedHeader(a.m.Headers()); h != "" {
		r.settleUndispatched(leaseCtx, a, job.StatusRejected, job.ReasonReservedHeader, "header "+h+" is reserved for the server's statuses")
		return
	}
	if r.o.Declared != nil {
		// This worker serves a.q: only the fleet's declarations, when it has some, refuse it.
		if err := r.o.Declared.QueueAllowed(a.q, a.tenant, func(string) bool { return true }); err != nil {
			r.settleUndispatched(leaseCtx, a, job.StatusRejected, job.ReasonUnknownQueue, err.Error())
			return
		}
	}
	req, bounds, err := job.Decode(a.m.Data(), a.id, r.o.Policy)
	if err != nil {
		var re *job.RejectError
		errors.As(err, &re)
		r.settleUndispatched(leaseCtx, a, job.StatusRejected, re.Reason, re.Detail)
		return
	}
	a.base.Labels = req.Labels
	a.base.RedriveOf = req.RedriveOf
	a.outputs = req.Outputs
	// An alias (piston's name, judge0's id) settles under the profile's own name.
	prof, _ := r.o.Profiles.Lookup(req.Language)
	a.base.Profile = cmp.Or(prof.Name, req.Language)
	a.base.ProfileDigest = prof.Digest
	switch {
	case !req.Deadline.IsZero() && time.Now().After(req.Deadline):
		r.settleUndispatched(leaseCtx, a, job.StatusExpired, "", "deadline "+req.Deadline.UTC().Format(time.RFC3339)+" passed before start")
		return
	case failures >= r.o.MaxFailures:
		r.settleUndispatched(leaseCtx, a, job.StatusError, job.ReasonInfrastructure, fmt.Sprintf("%d attempts failed before dispatch", failures))
		return
	}
	if c, err := r.results.Cancelled(ctx, a.tenant, a.id, a.meta.Timestamp); err != nil {
		r.release(leaseCtx, a, err)
		return
	} else if c {
		r.settleUndispatched(leaseCtx, a, job.StatusCancelled, job.ReasonCancelRequest, "cancelled before start")
		return
	}
	payload, err := profile.Payload(req)
	if err != nil {
		r.release(leaseCtx, a, err)
		return
	}
	sum := sha256.Sum256(payload)
	if err := r.reserve(ctx, leaseCtx, a, "sha256:"+hex.EncodeToString(sum[:]), prof.Digest); err != nil {
		return
	}
	r.phase("reserved")

	// A compile runs on the job's clock: the clock has the compile's time on top of the job's.
	limits := sandbox.Limits{Timeout: bounds.Timeout + prof.CompileTimeout, MemoryBytes: bounds.MemoryBytes, Pids: bounds.Pids, CPUs: r.o.Sandbox.CPUs}
	takeStart := time.Now()
	tctx, takeSpan := step(ctx, "take")
	sb, err := r.take(tctx, a, r.o.Sandbox.Shape(prof, limits), sandbox.Job{ID: a.id, Attempt: a.base.Attempt, Worker: r.o.Worker, Limits: limits})
	tracing.End(takeSpan, err)
	if err != nil {
		r.release(leaseCtx, a, err)
		return
	}
	if err := a.lease.Associate(ctx, sb.ID()); err != nil {
		// Also when the lease is lost: nothing entered the sandbox, and release.lua judges
		// whether the reservation is still this attempt's to withdraw.
		r.release(leaseCtx, a, errors.Join(err, destroy(ctx, sb)))
		return
	}
	r.phase("associated")
	if !r.passGate(ctx, leaseCtx, a, sb) {
		return
	}
	r.dispatch(ctx, leaseCtx, a, bounds, prof, payload, sb, time.Since(takeStart))
}

// passGate stores the attempt's dispatch marker, the last step before the payload may enter sb,
// and reports whether the job may be dispatched. When another attempt passed the gate first (its
// Redis record lost or never replicated), the job may have run: it settles unknown.
func (r *Runner) passGate(ctx, leaseCtx context.Context, a *attempt, sb sandbox.Sandbox) bool {
	if !a.lease.Valid() {
		r.release(leaseCtx, a, errors.Join(errLeaseLost, destroy(ctx, sb)))
		return false
	}
	gctx, cancel := context.WithTimeout(ctx, r.o.SettleWait)
	err := r.results.PassGate(gctx, a.tenant, a.id, a.base.Attempt, r.o.Worker)
	cancel()
	var passed *queue.GatePassedError
	switch {
	case errors.As(err, &passed):
		_ = destroy(ctx, sb)
		// Settle only while the lease holds: an attempt whose lease another claim took (a
		// failover) would store its unknown before the holder's real outcome.
		if err := a.lease.Extend(leaseCtx); err != nil {
			a.log.Warn("gate held by another attempt, and the lease lost: leaving the job to its holder", "by_attempt", passed.Attempt, "err", err)
			return false
		}
		r.settleUndispatched(leaseCtx, a, job.StatusUnknown, job.ReasonOutcomeLost, fmt.Sprintf("attempt %d dispatched the job and its outcome was lost", passed.Attempt))
		return false
	case err != nil:
		r.release(leaseCtx, a, errors.Join(err, destroy(ctx, sb)))
		return false
	}
	r.phase("gate")
	return true
}

// take returns a sandbox assigned to j. A waiting sandbox that ended while it waited (a daemon
// restart ends them all) is destroyed and the next one taken, until one is created for the job.
func (r *Runner) take(ctx context.Context, a *attempt, shape sandbox.Shape, j sandbox.Job) (sandbox.Sandbox, error) {
	for {
		sb, warm, err := r.o.Sandboxes.Take(ctx, shape)
		if err != nil {
			return nil, err
		}
		err = sb.Assign(ctx, j)
		if err == nil {
			a.log = a.log.With("sandbox", sb.ID(), "warm", warm)
			return sb, nil
		}
		derr := destroy(ctx, sb)
		if !warm || !errors.Is(err, sandbox.ErrEnded) {
			return nil, errors.Join(err, derr)
		}
		a.log.Warn("waiting sandbox had ended; taking another", "sandbox", sb.ID(), "err", err, "destroy_err", derr)
	}
}

// reserve retries a reservation whose reply was lost; it is idempotent for its holder. When it
// gives up, it releases the job: the reservation may be stored all the same (a reply lost, too
// few replicas), and only this attempt knows that nothing was dispatched. Too few replicas is
// the fleet's durability rule unmet, not the job's failure: the release counts none, and the
// claim loops wait for the replicas (durability), unless Options.DispatchWithoutReplica, when
// the reservation the master stored is enough.
func (r *Runner) reserve(ctx, leaseCtx context.Context, a *attempt, payloadSHA, profileDigest string) error {
	var err error
	for try := range 3 {
		if err = a.lease.Reserve(ctx, payloadSHA, profileDigest, r.provider.Name()); err == nil || errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrNotReplicated) {
			break
		}
		time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
	}
	switch {
	case errors.Is(err, lease.ErrNotReplicated):
		r.notReplicated(err)
		if r.o.DispatchWithoutReplica {
			return nil
		}
		r.releaseUncounted(leaseCtx, a, err)
	case err != nil:
		r.release(leaseCtx, a, err)
	}
	return err
}

// dispatch sends the payload into the associated sandbox, pages its output while it runs,
// destroys it and settles the job.
func (r *Runner) dispatch(ctx, leaseCtx context.Context, a *attempt, b job.Bounds, prof sandbox.Profile, payload []byte, sb sandbox.Sandbox, startup time.Duration) {
	chain := r.results.Chain(a.tenant, a.id, a.base.Attempt, a.trace)
	pages := newPager(func(pctx context.Context, stream string, index, offset int64, data []byte) error {
		if !a.lease.Valid() {
			return fmt.Errorf("page %d: %w", index, errLeaseLost)
		}
		return chain.Page(pctx, stream, index, offset, data)
	}, b)
	// Output publishes on a context that outlives a kill, so what the program printed before it
	// stays stored, and that lasts as long as the program may run plus the settle budget: a long
	// job prints until its own timeout.
	pubCtx, cancelPub := context.WithTimeout(leaseCtx, b.Timeout+prof.CompileTimeout+r.o.SettleWait)
	defer cancelPub()
	pout, stderr := pages.Writers(pubCtx)
	var stdout io.Writer = pout
	var compiled *compileStatus
	if prof.CompileTimeout > 0 {
		compiled = &compileStatus{w: pout}
		stdout = compiled
	}
	flushCtx, stopFlush := context.WithCancel(ctx)
	var flusher sync.WaitGroup
	flusher.Go(func() { pages.run(flushCtx, pubCtx) })

	r.o.Observer.Dispatched(a.q, a.tenant, time.Since(a.base.QueuedAt), startup)
	r.o.Observer.Running(a.tenant, 1)
	a.base.StartedAt = time.Now().UTC()
	a.log.Debug("dispatched")
	if r.o.Hook != nil {
		running := time.AfterFunc(200*time.Millisecond, func() { r.phase("running") })
		defer running.Stop()
	}
	rctx, runSpan := step(ctx, "run")
	exit, runErr := sb.Run(rctx, bytes.NewReader(payload), stdout, stderr)
	tracing.End(runSpan, runErr)
	a.base.FinishedAt = time.Now().UTC()
	r.o.Observer.Running(a.tenant, -1)
	stopFlush()
	flusher.Wait()

	sctx, cancel := r.settleCtx(leaseCtx)
	defer cancel()
	actx, artSpan := step(sctx, "artifacts")
	arts := r.collect(actx, a, b, sb)
	artSpan.End()
	if arts != nil {
		r.phase("collected")
	}
	destroyErr := destroy(sctx, sb)
	if destroyErr != nil {
		a.log.Error("destroy sandbox", "err", destroyErr)
	}
	if leaseCtx.Err() != nil {
		a.log.Warn("lease lost while running; storing nothing more")
		return
	}
	outBytes, errBytes, nPages, limit, pageErr := pages.finish(sctx)
	st := a.base
	st.SandboxDestroyed = destroyErr == nil
	st.StdoutBytes, st.StderrBytes, st.Pages = outBytes, errBytes, nPages
	st.Truncated = limit != ""
	if arts != nil {
		st.Artifacts, st.ArtifactsTruncated = arts.Artifacts, arts.Truncated
		if arts.Truncated {
			st.ArtifactsTruncatedReason = a.artifactsCut
		}
	}
	st.Usage = usage(exit.Usage)
	code := exit.Code
	st.ExitCode, st.Signal = &code, exit.Signal
	if errors.Is(pageErr, errLeaseLost) || errors.Is(pageErr, queue.ErrConflict) {
		a.log.Warn("result chain taken over; storing nothing more", "err", pageErr)
		return
	}
	st.Status, st.Reason, st.Detail = outcome(ctx, exit, runErr, pageErr, limit)
	if compiled.failed() && st.Status == job.StatusFailed && st.Reason == job.ReasonExitNonzero {
		st.Reason = job.ReasonCompileError
	}
	if runErr != nil {
		a.log.Error("run", "err", runErr)
	}
	if pageErr != nil {
		a.log.Error("store page", "err", pageErr)
	}
	if !st.Status.Ran() && st.Status != job.StatusCancelled && st.Status != job.StatusUnknown {
		st.ExitCode = nil
	}
	st.SettledAt = time.Now().UTC()
	if !a.lease.Valid() {
		a.log.Warn("lease trust window closed before settling; storing nothing more")
		return
	}
	settleCtx, settleSpan := step(sctx, "settle")
	r.settleChain(settleCtx, a, chain, st)
	settleSpan.SetAttributes(attribute.String("runfleet.status", string(st.Status)), attribute.String("runfleet.reason", string(st.Reason)))
	settleSpan.End()
}

// outcome is the status of a job that was dispatched, from how its program ended.
func outcome(ctx context.Context, exit sandbox.Exit, runErr, pageErr error, limit job.Reason) (job.Status, job.Reason, string) {
	cause := context.Cause(ctx)
	switch {
	case runErr != nil:
		return job.StatusUnknown, job.ReasonInfrastructure, "the sandbox failed while the job ran"
	case pageErr != nil:
		return job.StatusUnknown, job.ReasonInfrastructure, "output could not be stored"
	case errors.Is(cause, errCancelled):
		return job.StatusCancelled, job.ReasonCancelRequest, ""
	case errors.Is(cause, errShutdown) || (exit.Killed && ctx.Err() != nil):
		return job.StatusFailed, job.ReasonWorkerShutdown, ""
	case limit != "":
		return job.StatusFailed, limit, ""
	case exit.TimedOut:
		return job.StatusTimedOut, "", ""
	case exit.OOM:
		return job.StatusFailed, job.ReasonOOM, ""
	case exit.Signal != "":
		return job.StatusFailed, job.ReasonSignal, ""
	case exit.Code != 0:
		return job.StatusFailed, job.ReasonExitNonzero, ""
	}
	return job.StatusSucceeded, "", ""
}
