package runner

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
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
	// Sandboxes hands out the jobs' sandboxes, made ahead (a pool.Pool) or on demand; default: the
	// provider creates each one when its job needs it.
	Sandboxes Sandboxes
	Logger    *slog.Logger // carries the worker's identity; the runner adds job keys
	Observer  Observer
	// Index, when set, lists each job once its settlement is stored (internal/jobindex).
	Index Index
	// Usage, when set, counts each tenant's kept requests and artifacts, and bounds a job's
	// artifacts by its tenant's max_artifact_bytes (internal/jobindex).
	Usage Usage
	// Declared, when set, says which queues the fleet declares for which tenants: a job on
	// another is rejected unknown_queue. Default: every queue served is open to every tenant.
	Declared Declared
	// Tenants gives each tenant's weight and max_running (a *tenant.Policies, live); default:
	// weight 1 and no limits for every tenant.
	Tenants fairshare.Policies
	// Running keeps max_running across the fleet; without it no tenant is capped.
	Running *fairshare.Running
	// DispatchWithoutReplica dispatches a job whose reservation too few Redis replicas
	// acknowledged (lease.ErrNotReplicated), where the runner otherwise claims nothing until
	// they do: the operator's choice to go on while a failover could lose reservations.
	DispatchWithoutReplica bool
	// Hook, when set, is told each phase a job passes: claimed, reserved, associated, running (the
	// program has run a moment), collected (its outputs are stored, the job is not yet settled),
	// settled. Fault tests kill the process at one; production builds leave it nil.
	Hook func(phase string)
}

// SandboxOptions are the sandbox sizes that are not per-job limits.
type SandboxOptions struct {
	CPUs           float64
	WorkspaceBytes int64
	TmpBytes       int64
}

// Shape is the shape of the sandboxes of profile p, waiting under limits l until a job's own
// replace them: what a pool must make for the runner's takes to fit.
func (o SandboxOptions) Shape(p sandbox.Profile, l sandbox.Limits) sandbox.Shape {
	l.CPUs = o.CPUs
	return sandbox.Shape{Profile: p, WorkspaceBytes: o.WorkspaceBytes, TmpBytes: o.TmpBytes, Limits: l}
}

// Sandboxes hands out a sandbox for a job of shape; warm says it was made before the job came.
type Sandboxes interface {
	Take(ctx context.Context, shape sandbox.Shape) (sb sandbox.Sandbox, warm bool, err error)
}

// creator takes each sandbox straight from the provider.
type creator struct{ p sandbox.Provider }

func (c creator) Take(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, bool, error) {
	sb, err := c.p.Create(ctx, shape)
	return sb, false, err
}

// Index lists settled jobs. Adding a row again must change nothing: an adopting attempt adds the
// row of a settlement another attempt stored.
type Index interface {
	Add(ctx context.Context, rows ...job.Listed) error
}

// Usage counts what each tenant holds of the fleet's storage.
type Usage interface {
	Kept(ctx context.Context, tenant string, at time.Time, bytes int64) error
	ArtifactsStored(ctx context.Context, tenant string, at time.Time, bytes int64) error
	Usage(ctx context.Context, tenant string) (protocol.TenantUsage, error)
}

// Declared is the fleet's queue declarations (a *tenant.Policies, live).
type Declared interface {
	QueueAllowed(queue, tenant string, served func(queue string) bool) error
}

// Observer hears of job transitions, for metrics. Its methods must not block.
// Tenant labels are the job's tenant.
type Observer interface {
	Claimed(queue string, redelivered bool)
	Dispatched(queue, tenant string, wait, start time.Duration)
	// Settled is told each settlement this worker stored; cpu is the sandbox CPU time measured,
	// zero when none was.
	Settled(queue, tenant string, status job.Status, reason job.Reason, run, total, cpu time.Duration)
	LeaseLost(queue string)
	Running(tenant string, delta int)
	// Queued is told each tenant's jobs waiting on this worker's queues, at each sweep.
	Queued(byTenant map[string]uint64)
}

type nopObserver struct{}

func (nopObserver) Claimed(string, bool)                                    {}
func (nopObserver) Dispatched(string, string, time.Duration, time.Duration) {}
func (nopObserver) Settled(string, string, job.Status, job.Reason, time.Duration, time.Duration, time.Duration) {
}
func (nopObserver) LeaseLost(string)         {}
func (nopObserver) Running(string, int)      {}
func (nopObserver) Queued(map[string]uint64) {}

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

	cancels   cancels
	consuming atomic.Bool
	durable   *durability
	bucket    bucket
}

// New returns a runner. The streams must exist (protocol.EnsureStreams).
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
	if o.Sandboxes == nil {
		o.Sandboxes = creator{provider}
	}
	if o.Policy.Languages == nil {
		o.Policy.Languages = o.Profiles.Has
	}
	return &Runner{nc: nc, js: js, subjects: subjects, results: queue.NewResults(js, subjects), leases: leases,
		provider: provider, o: o, log: cmp.Or(o.Logger, slog.Default()), durable: newDurability()}
}

// Running returns how many jobs are running now.
func (r *Runner) Running() int { return r.cancels.len() }

// Consuming reports whether Serve is claiming from every queue: its consumers and its cancel
// watch are set up, and it has not been told to stop. A worker is ready only then.
func (r *Runner) Consuming() bool { return r.consuming.Load() }

// Serve claims and runs jobs until claimCtx ends, then waits for the jobs it runs. When runCtx
// ends, running jobs are killed and settle failed/worker_shutdown. Cancel claimCtx first and
// runCtx after a grace period for a graceful stop: Serve returns as soon as claimCtx ended and
// no job runs, without waiting for runCtx. A stop that comes while Serve is still setting
// up is a clean stop too: Serve returns nil.
//
// Jobs come from one consumer per queue and tenant; which one a free slot fetches from next is
// the fair-share scheduler's choice (internal/fairshare).
func (r *Runner) Serve(claimCtx, runCtx context.Context) error {
	stopWatch, err := r.watchCancels(claimCtx)
	if err != nil {
		if claimCtx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopWatch()

	sched := fairshare.New(fairshare.Options{Policies: r.o.Tenants, Running: r.o.Running, Logger: r.log})
	ts, err := r.newTenants(claimCtx, sched)
	if err == nil {
		var stopListen func()
		if stopListen, err = ts.listen(); err == nil {
			defer stopListen()
		}
	}
	if err != nil {
		if claimCtx.Err() != nil {
			return nil
		}
		return err
	}
	puller, err := queue.NewPuller(r.nc, r.js)
	if err != nil {
		return err
	}
	defer puller.Close()
	slots := make(chan struct{}, r.o.Concurrency)
	var jobs, loops, keep sync.WaitGroup
	if r.o.Running != nil {
		// The running slots are renewed for as long as a job may hold one: until the last job
		// released its own, not until runCtx ends, which would hold an idle worker's stop for its
		// whole grace period.
		keepCtx, stopKeep := context.WithCancel(context.WithoutCancel(claimCtx))
		keep.Go(func() { r.o.Running.Keep(keepCtx, r.log) })
		defer keep.Wait()
		defer stopKeep()
	}
	for q := range ts.queues {
		loops.Go(func() { ts.discover(claimCtx, q, puller) })
	}
	loops.Go(func() { ts.upkeep(claimCtx) })
	loops.Go(func() { r.watchDurability(claimCtx) })
	// Several claim loops, so that fetches from several tenants' consumers are in flight at once:
	// with many tenants a fetch often brings one job, and one loop would make them one at a time.
	for range min(r.o.Concurrency, claimLoops) {
		loops.Go(func() { r.claimLoop(claimCtx, runCtx, sched, puller, slots, &jobs) })
	}
	r.consuming.Store(true)
	stopReady := context.AfterFunc(claimCtx, func() { r.consuming.Store(false) })
	defer stopReady()
	loops.Wait()
	r.consuming.Store(false)
	jobs.Wait()
	return nil
}

// claimLoop takes free slots, asks the scheduler whose jobs to fetch, and starts what comes.
func (r *Runner) claimLoop(claimCtx, runCtx context.Context, sched *fairshare.Scheduler, puller *queue.Puller, slots chan struct{}, jobs *sync.WaitGroup) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case slots <- struct{}{}:
		case <-claimCtx.Done():
			return
		}
		// Too few Redis replicas: no job is claimed, and each waits in its stream (durability).
		if !r.o.DispatchWithoutReplica && r.durable.wait(claimCtx) != nil {
			<-slots
			return
		}
		// Under load one fetch brings a job for each free slot, where a fetch per job bounded a
		// worker to about 600 jobs/s (internal/cmd/cpbench). The fetch does not wait: the
		// scheduler picks only consumers that have jobs waiting, as far as it knows.
		n := 1 + takeFree(slots, maxBatch-1)
		g, err := sched.Pick(claimCtx, n)
		if err != nil {
			release(slots, n)
			return
		}
		msgs, err := puller.FetchNoWait(claimCtx, g.Source, g.N)
		handles := g.Fetched(claimCtx, len(msgs), lastSeq(msgs))
		release(slots, n-len(msgs))
		if err != nil && claimCtx.Err() == nil {
			r.log.Warn("fetch", "queue", g.Pair.Queue, "tenant", g.Pair.Tenant, "err", err)
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			case <-claimCtx.Done():
			}
		} else {
			backoff = 100 * time.Millisecond
		}
		for i, m := range msgs {
			if claimCtx.Err() != nil {
				_ = m.Nak() // claimed after the stop: another worker takes it now
				handles[i].Done(runCtx, -1)
				<-slots
				continue
			}
			jobs.Go(func() {
				defer func() { <-slots }()
				defer handles[i].Done(runCtx, -1)
				r.handle(runCtx, g.Pair.Queue, g.Source, m, handles[i])
			})
		}
	}
}

// lastSeq is the highest stream sequence of msgs; 0 when none says.
func lastSeq(msgs []jetstream.Msg) uint64 {
	var last uint64
	for _, m := range msgs {
		if meta, err := m.Metadata(); err == nil {
			last = max(last, meta.Sequence.Stream)
		}
	}
	return last
}

// claimLoops bounds the fetches a worker has in flight at once.
const claimLoops = 4

// maxBatch bounds the jobs one fetch brings.
const maxBatch = 32

// takeFree takes up to n more slots without waiting, and returns how many it took.
func takeFree(slots chan struct{}, n int) int {
	for i := range n {
		select {
		case slots <- struct{}{}:
		default:
			return i
		}
	}
	return n
}

func release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// phase tells the hook, if any, that a job reached phase.
func (r *Runner) phase(name string) {
	if r.o.Hook != nil {
		r.o.Hook(name)
	}
}

// ShutdownCause marks a runCtx ended by a worker shutdown, so jobs killed by it settle
// failed/worker_shutdown.
func ShutdownCause() error { return errShutdown }
