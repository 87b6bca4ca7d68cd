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
	// Sandboxes hands out the jobs' sandboxes, made ahead (a pool.Pool) or on demand; default: the
	// provider creates each one when its job needs it.
	Sandboxes Sandboxes
	Logger    *slog.Logger // carries the worker's identity; the runner adds job keys
	Observer  Observer
	// Index, when set, lists each job once its settlement is stored (internal/jobindex).
	Index Index
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

	cancels   cancels
	consuming atomic.Bool
	bucket    bucket
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
	if o.Sandboxes == nil {
		o.Sandboxes = creator{provider}
	}
	if o.Policy.Languages == nil {
		o.Policy.Languages = o.Profiles.Has
	}
	return &Runner{nc: nc, js: js, subjects: subjects, results: queue.NewResults(js, subjects), leases: leases,
		provider: provider, o: o, log: cmp.Or(o.Logger, slog.Default())}
}

// Running returns how many jobs are running now.
func (r *Runner) Running() int { return r.cancels.len() }

// Consuming reports whether Serve is claiming from every queue: its consumers and its cancel
// watch are set up, and it has not been told to stop. A worker is ready only then.
func (r *Runner) Consuming() bool { return r.consuming.Load() }

// Serve claims and runs jobs until claimCtx ends, then waits for the jobs it runs. When runCtx
// ends, running jobs are killed and settle failed/worker_shutdown. Cancel claimCtx first and
// runCtx after a grace period for a graceful stop. A stop that comes while Serve is still setting
// up is a clean stop too: Serve returns nil.
func (r *Runner) Serve(claimCtx, runCtx context.Context) error {
	stopWatch, err := r.watchCancels(claimCtx)
	if err != nil {
		if claimCtx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopWatch()

	consumers := make(map[string]*queue.Source, len(r.o.Queues))
	for _, q := range r.o.Queues {
		c, err := queue.Consumer(claimCtx, r.js, r.subjects, q, queue.ConsumerOptions{AckWait: 3 * r.leases.TTL()})
		if err != nil {
			if claimCtx.Err() != nil {
				return nil
			}
			return err
		}
		consumers[q] = c
	}
	slots := make(chan struct{}, r.o.Concurrency)
	var jobs, loops sync.WaitGroup
	for q, c := range consumers {
		loops.Go(func() { r.fetchLoop(claimCtx, runCtx, q, c, slots, &jobs) })
	}
	r.consuming.Store(true)
	stopReady := context.AfterFunc(claimCtx, func() { r.consuming.Store(false) })
	defer stopReady()
	loops.Wait()
	r.consuming.Store(false)
	jobs.Wait()
	return nil
}

func (r *Runner) fetchLoop(claimCtx, runCtx context.Context, q string, src *queue.Source, slots chan struct{}, jobs *sync.WaitGroup) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case slots <- struct{}{}:
		case <-claimCtx.Done():
			return
		}
		if n := 1 + takeFree(slots, maxBatch-1); n > 1 {
			// Under load one fetch brings a job for each free slot, where a fetch per job bounded
			// a worker to about 600 jobs/s (internal/cmd/cpbench). It does not wait, so no slot
			// is held for a job that has not come; when it brings none, a fetch of one job waits.
			// Its error, if any, is the waiting fetch's too, and reported there.
			got := 0
			if batch, err := src.FetchNoWait(n); err == nil {
				got = r.start(claimCtx, runCtx, q, src, batch, slots, jobs)
			}
			if got > 0 {
				release(slots, n-got)
				backoff = 100 * time.Millisecond
				continue
			}
			release(slots, n-1)
		}
		batch, err := src.Fetch(1, jetstream.FetchMaxWait(time.Second))
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
		if r.start(claimCtx, runCtx, q, src, batch, slots, jobs) == 0 {
			<-slots
		}
	}
}

// maxBatch bounds the jobs one fetch brings.
const maxBatch = 32

// start runs each job of batch on a slot the caller holds for it, and returns how many came; each
// job gives its slot back when it ends.
func (r *Runner) start(claimCtx, runCtx context.Context, q string, src *queue.Source, batch jetstream.MessageBatch, slots chan struct{}, jobs *sync.WaitGroup) int {
	got := 0
	for m := range batch.Messages() {
		got++
		if claimCtx.Err() != nil {
			_ = m.Nak() // claimed after the stop: another worker takes it now
			<-slots
			continue
		}
		jobs.Go(func() {
			defer func() { <-slots }()
			r.handle(runCtx, q, src, m)
		})
	}
	return got
}

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
