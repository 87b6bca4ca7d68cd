package runner

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/internal/lease"
	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/queue"
	"github.com/runfleet/runfleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

var (
	errLeaseLost = errors.New("lease lost")
	errCancelled = errors.New("cancel requested")
	errShutdown  = errors.New("worker shutting down")
)

// Options configure a [Runner]. Zero fields take the defaults named.
type Options struct {
	Worker      string   // identity shown in settlements
	Queues      []string // default [job.DefaultQueue]
	Concurrency int      // sandboxes at once; default 1
	Policy      job.Policy
	Profiles    profile.Set
	MaxFailures int           // pre-dispatch failures before a job settles error; default 5
	SettleWait  time.Duration // how long a settlement may take once the job ended; default 30 s
	Sandbox     SandboxOptions
	Logger      *slog.Logger
	Observer    Observer
	// CrashAt names a phase at which the process kills itself with SIGKILL, for fault tests:
	// claimed, reserved, associated, running, settled.
	CrashAt string
}

// SandboxOptions are the sandbox sizes that are not per-job limits.
type SandboxOptions struct {
	CPUs           float64
	WorkspaceBytes int64
	TmpBytes       int64
}

// Observer hears of job transitions, for metrics. Its methods must not block.
type Observer interface {
	Claimed(queue string, redelivered bool)
	Dispatched(queue string, wait, start time.Duration)
	Settled(queue string, status job.Status, reason job.Reason, run, total time.Duration)
	LeaseLost(queue string)
	Running(delta int)
}

type nopObserver struct{}

func (nopObserver) Claimed(string, bool)                                                 {}
func (nopObserver) Dispatched(string, time.Duration, time.Duration)                      {}
func (nopObserver) Settled(string, job.Status, job.Reason, time.Duration, time.Duration) {}
func (nopObserver) LeaseLost(string)                                                     {}
func (nopObserver) Running(int)                                                          {}

// Runner runs the jobs of a worker.
type Runner struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects job.Subjects
	results  *queue.Results
	leases   *lease.Store
	provider sandbox.Provider
	o        Options
	log      *slog.Logger

	mu      sync.Mutex
	cancels map[string]context.CancelCauseFunc // running jobs by id
}

// New returns a runner. The streams must exist (runfleet.EnsureStreams).
func New(nc *nats.Conn, js jetstream.JetStream, subjects job.Subjects, leases *lease.Store, provider sandbox.Provider, o Options) *Runner {
	if len(o.Queues) == 0 {
		o.Queues = []string{job.DefaultQueue}
	}
	o.Concurrency = max(o.Concurrency, 1)
	o.MaxFailures = cmp.Or(o.MaxFailures, 5)
	o.SettleWait = cmp.Or(o.SettleWait, 30*time.Second)
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Policy.Languages == nil {
		o.Policy.Languages = o.Profiles.Has
	}
	log := cmp.Or(o.Logger, slog.Default()).With("worker", o.Worker)
	return &Runner{nc: nc, js: js, subjects: subjects, results: queue.NewResults(js, subjects), leases: leases,
		provider: provider, o: o, log: log, cancels: map[string]context.CancelCauseFunc{}}
}

// Running returns how many jobs are running now.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cancels)
}

// Serve claims and runs jobs until claimCtx ends, then waits for the jobs it runs. When runCtx
// ends, running jobs are killed and settle failed/worker_shutdown. Cancel claimCtx first and
// runCtx after a grace period for a graceful stop.
func (r *Runner) Serve(claimCtx, runCtx context.Context) error {
	sub, err := r.nc.Subscribe(r.subjects.AllCancels(), func(m *nats.Msg) {
		r.cancel(m.Subject[len(r.subjects.Cancel("")):], errCancelled)
	})
	if err != nil {
		return fmt.Errorf("subscribe to cancels: %w", err)
	}
	defer sub.Unsubscribe()

	consumers := make(map[string]jetstream.Consumer, len(r.o.Queues))
	for _, q := range r.o.Queues {
		c, err := queue.Consumer(claimCtx, r.js, r.subjects, q, queue.ConsumerOptions{AckWait: 3 * r.leases.TTL()})
		if err != nil {
			return err
		}
		consumers[q] = c
	}
	slots := make(chan struct{}, r.o.Concurrency)
	var jobs, loops sync.WaitGroup
	for q, c := range consumers {
		loops.Go(func() { r.fetchLoop(claimCtx, runCtx, q, c, slots, &jobs) })
	}
	loops.Wait()
	jobs.Wait()
	return nil
}

func (r *Runner) fetchLoop(claimCtx, runCtx context.Context, q string, c jetstream.Consumer, slots chan struct{}, jobs *sync.WaitGroup) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case slots <- struct{}{}:
		case <-claimCtx.Done():
			return
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			<-slots
			r.log.Warn("fetch", "queue", q, "err", err)
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			case <-claimCtx.Done():
				return
			}
			continue
		}
		backoff = 100 * time.Millisecond
		got := false
		for m := range batch.Messages() {
			got = true
			if claimCtx.Err() != nil {
				_ = m.Nak() // claimed after the stop: another worker takes it now
				<-slots
				continue
			}
			jobs.Go(func() {
				defer func() { <-slots }()
				r.handle(runCtx, q, m)
			})
		}
		if !got {
			<-slots
		}
	}
}

func (r *Runner) cancel(id string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cancels[id]; ok {
		c(cause)
	}
}

func (r *Runner) crash(phase string) {
	if r.o.CrashAt == phase {
		r.log.Warn("crashing on purpose", "phase", phase)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// attempt is one delivery of one job.
type attempt struct {
	q     string
	m     jetstream.Msg
	meta  *jetstream.MsgMetadata
	id    string
	trace string
	log   *slog.Logger
	lease *lease.Lease
	base  job.Settlement // fields every settlement of this attempt carries
}

func (r *Runner) handle(runCtx context.Context, q string, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		r.log.Error("message without metadata", "queue", q, "err", err)
		_ = m.Term()
		return
	}
	id := m.Headers().Get(job.HeaderMsgID)
	if !job.ValidID(id) {
		r.rejectUnreadable(runCtx, q, m, meta, id)
		return
	}
	a := &attempt{q: q, m: m, meta: meta, id: id, trace: m.Headers().Get(job.HeaderTraceparent),
		log: r.log.With("job_id", id, "queue", q, "delivery", meta.NumDelivered)}
	a.base = job.Settlement{JobID: id, Worker: r.o.Worker, Provider: r.provider.Name(), QueuedAt: meta.Timestamp.UTC()}

	jctx, cancel := context.WithCancelCause(runCtx)
	defer cancel(nil)
	r.mu.Lock()
	r.cancels[id] = cancel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.cancels, id)
		r.mu.Unlock()
	}()

	claim, err := r.leases.Claim(jctx, id, r.o.Worker, lease.Delivery{Count: meta.NumDelivered, QueuedAt: meta.Timestamp})
	if err != nil {
		a.log.Error("claim", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	r.o.Observer.Claimed(q, meta.NumDelivered > 1)
	switch claim.Mode {
	case lease.ModeSettled:
		a.log.Info("already settled; acking redelivery", "status", claim.Status)
		_ = m.DoubleAck(jctx)
		return
	case lease.ModeHeld:
		a.log.Info("held by another worker")
		_ = m.NakWithDelay(r.leases.TTL())
		return
	}
	a.lease = claim.Lease
	a.base.Attempt = claim.Lease.Generation()
	a.log = a.log.With("attempt", a.base.Attempt)
	a.log.Info("claimed", "mode", claim.Mode)
	r.crash("claimed")

	var hb sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(jctx)
	hb.Go(func() { r.heartbeat(hbCtx, a, cancel) })
	defer func() {
		stopHB()
		hb.Wait()
	}()

	switch claim.Mode {
	case lease.ModeUnknown:
		r.settleOnce(jctx, a, job.StatusUnknown, job.ReasonOutcomeLost, "an earlier attempt dispatched the job and its outcome was lost")
		return
	case lease.ModeRecordLost:
		r.settleOnce(jctx, a, job.StatusUnknown, job.ReasonRecordLost, "the job's record was lost after it was delivered")
		return
	}
	r.run(jctx, a, claim.Failures)
}

func (r *Runner) rejectUnreadable(ctx context.Context, q string, m jetstream.Msg, meta *jetstream.MsgMetadata, id string) {
	reason := job.ReasonInvalidID
	detail := "Nats-Msg-Id is not a valid job id"
	if id == "" {
		reason, detail = job.ReasonMissingMessageID, "no Nats-Msg-Id header"
	}
	rec := job.Rejection{StreamSeq: meta.Sequence.Stream, Subject: m.Subject(), Reason: reason, Detail: detail}
	if err := r.results.Reject(ctx, rec); err != nil {
		r.log.Error("record rejection", "queue", q, "stream_seq", rec.StreamSeq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	r.log.Info("rejected unreadable message", "queue", q, "stream_seq", rec.StreamSeq, "reason", reason)
	r.o.Observer.Settled(q, job.StatusRejected, reason, 0, 0)
	_ = m.DoubleAck(ctx)
}

// heartbeat extends the lease and tells JetStream the delivery is in progress, a third of a TTL
// apart. When the trust window closes it cancels the job with errLeaseLost.
func (r *Runner) heartbeat(ctx context.Context, a *attempt, cancel context.CancelCauseFunc) {
	every := r.leases.TTL() / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := a.lease.Extend(ctx)
		if err == nil {
			_ = a.m.InProgress()
			t.Reset(every)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, lease.ErrLost) || !a.lease.Valid() {
			a.log.Warn("lease lost; stopping the job", "err", err)
			r.o.Observer.LeaseLost(a.q)
			cancel(errLeaseLost)
			return
		}
		a.log.Warn("extend lease", "err", err, "window_left", a.lease.Remaining())
		t.Reset(min(every, max(a.lease.Remaining()/2, 10*time.Millisecond)))
	}
}

// settleCtx outlives the job's context on purpose, so a job killed by shutdown still settles.
func (r *Runner) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.o.SettleWait)
}

// settleOnce settles a job this attempt does not dispatch.
func (r *Runner) settleOnce(ctx context.Context, a *attempt, status job.Status, reason job.Reason, detail string) {
	st := a.base
	st.Status, st.Reason, st.Detail = status, reason, detail
	st.SettledAt = time.Now().UTC()
	sctx, cancel := r.settleCtx(ctx)
	defer cancel()
	err := r.results.SettleOnce(sctx, st, a.trace)
	if errors.Is(err, queue.ErrConflict) {
		r.adoptSettlement(sctx, a)
		return
	}
	if err != nil {
		a.log.Error("store settlement", "status", status, "err", err)
		_ = a.m.NakWithDelay(time.Second)
		return
	}
	r.stored(sctx, a, st, 0)
}

// adoptSettlement acks a job whose settlement another attempt stored first.
func (r *Runner) adoptSettlement(ctx context.Context, a *attempt) {
	prev, err := r.results.Settlement(ctx, a.id)
	if err != nil {
		a.log.Error("read stored settlement", "err", err)
		_ = a.m.NakWithDelay(time.Second)
		return
	}
	a.log.Info("settled by an earlier attempt", "status", prev.Status, "by_attempt", prev.Attempt)
	if err := r.leases.Settled(ctx, a.id, string(prev.Status)); err != nil {
		a.log.Warn("record settlement", "err", err)
	}
	_ = a.m.DoubleAck(ctx)
}

// stored finishes a job whose settlement is stored: record it, ack the message.
func (r *Runner) stored(ctx context.Context, a *attempt, st job.Settlement, run time.Duration) {
	code := -1
	if st.ExitCode != nil {
		code = *st.ExitCode
	}
	a.log.Info("settled", "status", st.Status, "reason", st.Reason, "exit_code", code,
		"pages", st.Pages, "stdout_bytes", st.StdoutBytes, "stderr_bytes", st.StderrBytes)
	r.crash("settled")
	if err := a.lease.Settled(ctx, string(st.Status)); err != nil {
		a.log.Warn("record settlement", "err", err)
	}
	if err := a.m.DoubleAck(ctx); err != nil {
		a.log.Warn("ack", "err", err)
	}
	r.o.Observer.Settled(a.q, st.Status, st.Reason, run, time.Since(a.base.QueuedAt))
}

// release gives up a job before dispatch, counting a failure, and asks for redelivery after a
// backoff. A job out of tries settles error.
func (r *Runner) release(ctx context.Context, a *attempt, cause error) {
	sctx, cancel := r.settleCtx(ctx)
	defer cancel()
	failures, err := a.lease.Release(sctx, true)
	if err != nil {
		a.log.Error("release", "err", err, "cause", cause)
		return
	}
	a.log.Warn("pre-dispatch failure", "err", cause, "failures", failures)
	_ = a.m.NakWithDelay(min(time.Duration(1<<min(failures, 6))*100*time.Millisecond, 10*time.Second))
}

func (r *Runner) run(ctx context.Context, a *attempt, failures int) {
	req, bounds, err := job.Decode(a.m.Data(), a.id, r.o.Policy)
	if err != nil {
		var re *job.RejectError
		errors.As(err, &re)
		r.settleOnce(ctx, a, job.StatusRejected, re.Reason, re.Detail)
		return
	}
	a.base.Labels = req.Labels
	a.base.Profile = req.Language
	prof := r.o.Profiles[req.Language]
	a.base.ProfileDigest = prof.Digest
	switch {
	case !req.Deadline.IsZero() && time.Now().After(req.Deadline):
		r.settleOnce(ctx, a, job.StatusExpired, "", "deadline "+req.Deadline.UTC().Format(time.RFC3339)+" passed before start")
		return
	case failures >= r.o.MaxFailures:
		r.settleOnce(ctx, a, job.StatusError, job.ReasonInfrastructure, fmt.Sprintf("%d attempts failed before dispatch", failures))
		return
	}
	if c, err := r.results.Cancelled(ctx, a.id); err != nil {
		r.release(ctx, a, err)
		return
	} else if c {
		r.settleOnce(ctx, a, job.StatusCancelled, job.ReasonCancelRequest, "cancelled before start")
		return
	}
	payload, err := profile.Payload(req)
	if err != nil {
		r.release(ctx, a, err)
		return
	}
	sum := sha256.Sum256(payload)
	if err := r.reserve(ctx, a, "sha256:"+hex.EncodeToString(sum[:]), prof.Digest); err != nil {
		return
	}
	r.crash("reserved")

	spec := sandbox.Spec{JobID: a.id, Attempt: a.base.Attempt, Worker: r.o.Worker, Profile: prof,
		Timeout: bounds.Timeout, MemoryBytes: bounds.MemoryBytes, Pids: bounds.Pids, CPUs: r.o.Sandbox.CPUs,
		WorkspaceBytes: r.o.Sandbox.WorkspaceBytes, TmpBytes: r.o.Sandbox.TmpBytes}
	createStart := time.Now()
	sb, err := r.provider.Create(ctx, spec)
	if err != nil {
		r.release(ctx, a, err)
		return
	}
	a.log = a.log.With("sandbox", sb.ID())
	if err := a.lease.Associate(ctx, sb.ID()); err != nil {
		derr := sb.Destroy(context.WithoutCancel(ctx))
		if errors.Is(err, lease.ErrLost) {
			a.log.Warn("lease lost before dispatch", "err", err, "destroy_err", derr)
			return
		}
		r.release(ctx, a, errors.Join(err, derr))
		return
	}
	r.crash("associated")
	r.dispatch(ctx, a, req, bounds, payload, sb, time.Since(createStart))
}

// reserve retries a reservation whose reply was lost; it is idempotent for its holder. When it
// gives up, the job may be recorded as reserved: it is left for redelivery, which settles it
// unknown, and is not dispatched here.
func (r *Runner) reserve(ctx context.Context, a *attempt, payloadSHA, profileDigest string) error {
	var err error
	for try := range 3 {
		if err = a.lease.Reserve(ctx, payloadSHA, profileDigest, r.provider.Name()); err == nil || errors.Is(err, lease.ErrLost) {
			break
		}
		time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
	}
	if err != nil {
		a.log.Error("reserve dispatch; not dispatching", "err", err)
		_ = a.m.NakWithDelay(time.Second)
	}
	return err
}

func (r *Runner) dispatch(ctx context.Context, a *attempt, req job.Request, b job.Bounds, payload []byte, sb sandbox.Sandbox, startup time.Duration) {
	chain := r.results.Chain(a.id, a.base.Attempt, a.trace)
	pages := newPager(func(pctx context.Context, stream string, index, offset int64, data []byte) error {
		if !a.lease.Valid() {
			return fmt.Errorf("page %d: %w", index, errLeaseLost)
		}
		return chain.Page(pctx, stream, index, offset, data)
	}, b)
	// Pages publish on a context that outlives a kill, so output produced before it stays stored.
	pubCtx, cancelPub := r.settleCtx(ctx)
	defer cancelPub()
	stdout, stderr := pages.Writers(pubCtx)
	flushCtx, stopFlush := context.WithCancel(ctx)
	var flusher sync.WaitGroup
	flusher.Go(func() { pages.run(flushCtx, pubCtx) })

	r.o.Observer.Dispatched(a.q, time.Since(a.base.QueuedAt), startup)
	r.o.Observer.Running(1)
	a.base.StartedAt = time.Now().UTC()
	a.log.Info("dispatched")
	if r.o.CrashAt == "running" {
		time.AfterFunc(200*time.Millisecond, func() { r.crash("running") })
	}
	exit, runErr := sb.Run(ctx, bytes.NewReader(payload), stdout, stderr)
	a.base.FinishedAt = time.Now().UTC()
	r.o.Observer.Running(-1)
	stopFlush()
	flusher.Wait()

	sctx, cancel := r.settleCtx(ctx)
	defer cancel()
	destroyErr := sb.Destroy(sctx)
	if destroyErr != nil {
		a.log.Error("destroy sandbox", "err", destroyErr)
	}
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		a.log.Warn("lease lost while running; storing nothing more")
		return
	}
	outBytes, errBytes, nPages, limit, pageErr := pages.finish(sctx)

	st := a.base
	st.SandboxDestroyed = destroyErr == nil
	st.StdoutBytes, st.StderrBytes, st.Pages = outBytes, errBytes, nPages
	st.Truncated = limit != ""
	st.Usage = usage(exit.Usage)
	code := exit.Code
	st.ExitCode, st.Signal = &code, exit.Signal
	cause := context.Cause(ctx)
	switch {
	case errors.Is(pageErr, queue.ErrConflict) || errors.Is(pageErr, errLeaseLost):
		a.log.Warn("result chain taken over; storing nothing more", "err", pageErr)
		return
	case runErr != nil:
		st.Status, st.Reason, st.Detail = job.StatusUnknown, job.ReasonInfrastructure, "the sandbox failed while the job ran"
		a.log.Error("run", "err", runErr)
	case pageErr != nil:
		st.Status, st.Reason, st.Detail = job.StatusUnknown, job.ReasonInfrastructure, "output could not be stored"
		a.log.Error("store page", "err", pageErr)
	case errors.Is(cause, errCancelled):
		st.Status, st.Reason = job.StatusCancelled, job.ReasonCancelRequest
	case errors.Is(cause, errShutdown) || (exit.Killed && ctx.Err() != nil):
		st.Status, st.Reason = job.StatusFailed, job.ReasonWorkerShutdown
	case limit != "":
		st.Status, st.Reason = job.StatusFailed, limit
	case exit.TimedOut:
		st.Status = job.StatusTimedOut
	case exit.OOM:
		st.Status, st.Reason = job.StatusFailed, job.ReasonOOM
	case exit.Signal != "":
		st.Status, st.Reason = job.StatusFailed, job.ReasonSignal
	case exit.Code != 0:
		st.Status, st.Reason = job.StatusFailed, job.ReasonExitNonzero
	default:
		st.Status = job.StatusSucceeded
	}
	if !st.Status.Ran() && st.Status != job.StatusCancelled && st.Status != job.StatusUnknown {
		st.ExitCode = nil
	}
	st.SettledAt = time.Now().UTC()
	if !a.lease.Valid() {
		a.log.Warn("lease trust window closed before settling; storing nothing more")
		return
	}
	err := chain.Settle(sctx, st)
	if errors.Is(err, queue.ErrConflict) {
		a.log.Warn("settled by another attempt; storing nothing more")
		r.adoptSettlement(sctx, a)
		return
	}
	if err != nil {
		a.log.Error("store settlement; leaving the job for redelivery", "err", err)
		return
	}
	r.stored(sctx, a, st, st.FinishedAt.Sub(st.StartedAt))
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

// ShutdownCause marks a runCtx ended by a worker shutdown, so jobs killed by it settle
// failed/worker_shutdown.
func ShutdownCause() error { return errShutdown }
