// Package backlog reads what waits on the fleet's queues from JetStream itself, so that it can be
// read while no worker runs: the signal an autoscaler scales workers from zero on.
//
// Invariants:
//
//   - Never a scan of the jobs stream. One read lists the jobs stream's consumers (one request
//     per 256 of them) and makes at most MaxGets direct gets: the oldest waiting job of each
//     queue and tenant that has one, found as the first message of its subject after what its
//     consumer delivered.
//   - Waiting is a queue's jobs not yet delivered to a worker; running, those delivered and not yet
//     acked. A tenant consumer counts only the jobs of its tenant; the queue's discovery consumer
//     counts the jobs stored since a worker last routed one, whatever their tenant. A queue's
//     waiting is the larger of the two, so that the jobs of a tenant no worker has discovered yet
//     count while never counting a job twice; with no consumer at all (a queue never served) a
//     queue holding a job is reported waiting 1, enough to wake one worker, which makes the
//     consumers that count the rest.
//   - A snapshot is shared by every reader and read at most once per TTL.
package backlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Defaults of [Options].
const (
	DefaultTTL         = time.Second
	DefaultMaxGets     = 256
	DefaultReadTimeout = 5 * time.Second
)

// Options configure a [Reader]. Zero fields take the documented defaults.
type Options struct {
	// Queues are reported even while no consumer of theirs exists (the gateway's default queue).
	Queues []string
	// Declared, when set, names the queues the fleet declares, read at each snapshot: they are
	// reported too. Every queue with a consumer is, declared or not.
	Declared    func() []string
	TTL         time.Duration // how old a shared snapshot may be; default DefaultTTL
	MaxGets     int           // direct gets per read (oldest waits); default DefaultMaxGets
	ReadTimeout time.Duration // bounds one read; default DefaultReadTimeout
	// TenantLabel maps a tenant to its metric label, so that the series stay bounded (the gateway
	// labels a tenant without a policy "other"). Nil: every tenant is its own label.
	TenantLabel func(tenant string) string
}

// Figures are the jobs of one queue, or of one queue and tenant.
type Figures struct {
	Waiting uint64 `json:"waiting"` // stored, not yet delivered to a worker
	Running uint64 `json:"running"` // delivered, not yet acked: claimed or running
	// Jobs is Waiting + Running: what a worker count is scaled on, so that running jobs keep
	// their workers.
	Jobs uint64 `json:"jobs"`
	// OldestWait is how long the oldest waiting job has waited; zero when none waits (or its time
	// was not read, past MaxGets).
	OldestWait time.Duration `json:"-"`
}

// Snapshot is one read of the fleet's backlog.
type Snapshot struct {
	At      time.Time
	Queues  map[string]Figures
	Tenants map[queue.Pair]Figures // by tenant consumer
}

// Reader reads the backlog of the fleet whose subjects it was given.
type Reader struct {
	js       jetstream.JetStream
	subjects job.Subjects
	o        Options

	mu   sync.Mutex // held by the one read under way
	snap Snapshot
	err  error
}

// New returns a reader of the backlog of the fleet on js.
func New(js jetstream.JetStream, subjects job.Subjects, o Options) *Reader {
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	o.MaxGets = cmp.Or(o.MaxGets, DefaultMaxGets)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	if o.TenantLabel == nil {
		o.TenantLabel = func(t string) string { return t }
	}
	return &Reader{js: js, subjects: subjects, o: o}
}

// Snapshot returns the backlog no older than the TTL, reading it when it is older. One caller
// reads; the others wait for its read.
func (r *Reader) Snapshot(ctx context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.snap.At) < r.o.TTL {
		return r.snap, r.err
	}
	// The read outlives the caller that started it: the others wait for it too.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.ReadTimeout)
	defer cancel()
	queues := r.o.Queues
	if r.o.Declared != nil {
		queues = append(slices.Clone(queues), r.o.Declared()...)
	}
	snap, err := r.read(rctx, queues)
	r.snap, r.err = snap, err
	if err != nil {
		r.snap.At = time.Now() // an unreachable server is asked again after the TTL, not at once
	}
	return r.snap, r.err
}

// ErrUnknownQueue is the error of [Reader.Queue] for a queue the snapshot does not report: not
// configured, not declared, and without a consumer.
var ErrUnknownQueue = errors.New("unknown queue")

// Queue returns the figures of queue q from the shared snapshot. A queue it does not report is
// [ErrUnknownQueue], never a read of its own: a caller naming new queues costs no JetStream request.
func (r *Reader) Queue(ctx context.Context, q string) (Figures, error) {
	snap, err := r.Snapshot(ctx)
	if err != nil {
		return Figures{}, err
	}
	f, ok := snap.Queues[q]
	if !ok {
		return Figures{}, fmt.Errorf("queue %s: %w", q, ErrUnknownQueue)
	}
	return f, nil
}

// discovery is what a read knows of one queue's discovery consumer.
type discovery struct {
	waiting  uint64 // delivered or not, not acked
	ackFloor uint64
}

func (r *Reader) read(ctx context.Context, queues []string) (Snapshot, error) {
	snap := Snapshot{Queues: map[string]Figures{}, Tenants: map[queue.Pair]Figures{}}
	jobs, err := r.js.Stream(ctx, r.subjects.JobsStream())
	if err != nil {
		return snap, fmt.Errorf("stream %s: %w", r.subjects.JobsStream(), err)
	}
	for _, q := range queues {
		snap.Queues[q] = Figures{}
	}
	discoveries := map[string]discovery{}
	backlogs := map[queue.Pair]queue.Backlog{}
	discoveryPrefix := r.subjects.Discovery("")
	list := jobs.ListConsumers(ctx)
	for info := range list.Info() {
		if q, ok := strings.CutPrefix(info.Name, discoveryPrefix); ok {
			discoveries[q] = discovery{waiting: info.NumPending + uint64(info.NumAckPending), ackFloor: info.AckFloor.Stream}
			continue
		}
		p := queue.Pair{Queue: info.Config.Metadata[protocol.MetadataQueue], Tenant: info.Config.Metadata[protocol.MetadataTenant]}
		if p.Queue == "" || p.Tenant == "" {
			continue
		}
		backlogs[p] = queue.Backlog{Pending: info.NumPending, AckPending: info.NumAckPending, Delivered: info.Delivered.Stream}
	}
	if err := list.Err(); err != nil {
		return snap, fmt.Errorf("list consumers of %s: %w", r.subjects.JobsStream(), err)
	}
	for q := range discoveries {
		snap.Queues[q] = Figures{}
	}
	snap.At = time.Now()
	gets := r.o.MaxGets
	pairs := slices.SortedFunc(maps.Keys(backlogs), func(a, b queue.Pair) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Tenant, b.Tenant))
	})
	for _, p := range pairs {
		b := backlogs[p]
		f := Figures{Waiting: b.Pending, Running: uint64(b.AckPending)}
		if b.Pending > 0 && gets > 0 {
			gets--
			at, err := queue.OldestWaiting(ctx, jobs, r.subjects, p, b)
			if err != nil {
				return snap, err
			}
			f.OldestWait = since(snap.At, at)
		}
		f.Jobs = f.Waiting + f.Running
		snap.Tenants[p] = f
		qf := snap.Queues[p.Queue]
		qf.Waiting += f.Waiting
		qf.Running += f.Running
		qf.OldestWait = max(qf.OldestWait, f.OldestWait)
		snap.Queues[p.Queue] = qf
	}
	for _, q := range slices.Sorted(maps.Keys(snap.Queues)) {
		qf := snap.Queues[q]
		d, served := discoveries[q]
		hasTenants := slices.ContainsFunc(pairs, func(p queue.Pair) bool { return p.Queue == q })
		var first uint64 // where the oldest job no tenant consumer may count yet is looked for
		switch {
		case served && d.waiting > 0:
			qf.Waiting = max(qf.Waiting, d.waiting)
			first = d.ackFloor + 1
		case !served && !hasTenants:
			first = 1
		}
		if first > 0 && gets > 0 {
			gets--
			m, err := jobs.GetMsg(ctx, first, jetstream.WithGetMsgSubject(r.subjects.QueueJobs(q)))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return snap, fmt.Errorf("oldest job of queue %s: %w", q, err)
			default:
				qf.Waiting = max(qf.Waiting, 1)
				qf.OldestWait = max(qf.OldestWait, since(snap.At, m.Time))
			}
		}
		qf.Jobs = qf.Waiting + qf.Running
		snap.Queues[q] = qf
	}
	return snap, nil
}

// since is how long before now at was, never below zero (the clocks of the server and this
// process may disagree), whole milliseconds; zero for the zero time.
func since(now, at time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	return max(now.Sub(at), 0).Truncate(time.Millisecond)
}
