package runfleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Page is one stored piece of a job's output.
type Page struct {
	Stream   string // job.Stdout or job.Stderr
	Index    int64  // over the whole job
	Offset   int64  // within Stream
	Attempt  int64
	Data     []byte
	Sequence uint64 // in the results stream: where [Client.WatchFrom] resumes
}

// RunOptions are the settings of [Client.Run]. The zero value is fine.
type RunOptions struct {
	SubmitOptions
	OnPage func(Page) error // called for each page as it is stored; an error stops the wait

	// CancelOnDone cancels the job when ctx ends before it settled; by default it goes on.
	CancelOnDone bool
}

// Run submits req to queue and waits for its settlement: [Client.Submit] then [Client.Watch].
// Like exec.Cmd.Run, it returns the settlement and, when the job did not succeed, st.Err() — a
// *[job.RejectError] or a *[job.OutcomeError] — inside a *[JobError]. A req.ID that was submitted
// before runs nothing new: Run waits for that job's settlement. [Client.Output] also returns the
// job's output.
//
// When ctx ends first, Run returns an error wrapping [ErrNoSettlement] and ctx's error, and the
// job goes on, unless o.CancelOnDone: then Run also asks the fleet to cancel it (the job settles
// cancelled unless it settled first). Every error after the id was chosen is a *[JobError]
// carrying it, so a caller that left req.ID empty can still find, watch or cancel the job.
func (c *Client) Run(ctx context.Context, queue string, req job.Request, o *RunOptions) (job.Settlement, error) {
	if o == nil {
		o = &RunOptions{}
	}
	if req.ID == "" {
		req.ID = job.NewID()
	}
	if !job.ValidID(req.ID) {
		return job.Settlement{}, &JobError{ID: req.ID, Err: job.ErrInvalidID}
	}
	// The watch subscribes before the job is published, so that all it stores arrives on the
	// subscription: no read of what was stored before is needed (unless the id was stored
	// before, a duplicate).
	tenant := cmp.Or(o.SubmitOptions.Tenant, c.tenant)
	w := &watch{c: c, tenant: tenant, id: req.ID, onPage: o.OnPage, index: -1, first: -1}
	msgs, unsubscribe, err := w.subscribe(ctx)
	if err != nil {
		return job.Settlement{}, &JobError{ID: req.ID, Err: fmt.Errorf("watch: %w", err)}
	}
	defer unsubscribe()
	sub, err := c.Submit(ctx, queue, req, &o.SubmitOptions)
	if err != nil {
		return job.Settlement{}, asJobError(req.ID, err)
	}
	st, err := w.follow(ctx, msgs, sub.Duplicate)
	err = w.wrap(ctx, err)
	if err != nil {
		if ctx.Err() != nil && o.CancelOnDone {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			defer cancel()
			if cerr := c.cancel(cctx, tenant, sub.ID); cerr != nil && !errors.Is(cerr, ErrSettled) {
				err = fmt.Errorf("%w (and its cancel: %w)", err, cerr)
			}
		}
		return st, asJobError(sub.ID, err)
	}
	if err := st.Err(); err != nil {
		return st, &JobError{ID: sub.ID, Err: err}
	}
	return st, nil
}

// cancelTimeout bounds the cancel [RunOptions.CancelOnDone] publishes after ctx ended.
const cancelTimeout = 5 * time.Second

// asJobError returns err as a *JobError of id, unless it already is one.
func asJobError(id string, err error) error {
	if je, ok := errors.AsType[*JobError](err); ok && je.ID == id {
		return err
	}
	return &JobError{ID: id, Err: err}
}

// backstop is how often a live watch re-reads what the stream stored of its job, whatever the
// republish showed: on a cluster a new subscription's interest reaches the other servers
// asynchronously, and a slow watcher's client drops what it cannot hold.
const backstop = 3 * time.Second

// watchBuffer is how many republished messages a watch holds before nats.go drops the next.
const watchBuffer = 64

// Watch replays the client's tenant's job id's pages from the start, calls onPage (which may be nil) for each as it is
// stored, and returns the settlement. It follows a running or waiting job live, and returns at
// once for a settled one. It never waits for a job the fleet does not know: an id it holds
// nothing of is [ErrNotFound]. A job whose pages have expired returns its settlement and
// [ErrExpired]. When ctx ends first the error wraps both [ErrNoSettlement] and ctx.Err().
func (c *Client) Watch(ctx context.Context, id string, onPage func(Page) error) (job.Settlement, error) {
	return c.WatchFrom(ctx, id, 0, onPage)
}

// WatchFrom is [Client.Watch] that skips what the results stream stored up to sequence after, so
// that a watcher which saw the page of [Page.Sequence] after resumes with the next one.
//
// A watch holds no JetStream consumer: it subscribes to the stream's republish of what it stored
// for the job ([job.Subjects.Watch]), never to the results subjects, which also carry publishes
// the stream refused (a fenced worker's pages). It then reads what was stored before with
// batched direct gets (when its last stored message is one it has not handled: a watch begun
// before the job's first output needs no batched get, which a NATS user bound to its tenant
// may not make), reads again from the last sequence it handled whenever a republished
// message's Nats-Last-Sequence shows one it missed, before a settlement that counts pages it did
// not handle, and every few seconds,
// and drops what it already handled by sequence and page index. It leaves nothing on the server.
func (c *Client) WatchFrom(ctx context.Context, id string, after uint64, onPage func(Page) error) (job.Settlement, error) {
	if !job.ValidID(id) {
		return job.Settlement{}, &JobError{ID: id, Err: job.ErrInvalidID}
	}
	w := &watch{c: c, tenant: c.tenant, id: id, onPage: onPage, after: after, last: after, index: -1, first: -1}
	st, err := w.run(ctx)
	return st, w.wrap(ctx, err)
}

// wrap is the error of a watch as its callers return it: a *JobError, wrapping ErrNoSettlement
// and ctx's error when ctx ended first.
func (w *watch) wrap(ctx context.Context, err error) error {
	id := w.id
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, ErrExpired) {
			return &JobError{ID: id, Err: fmt.Errorf("watch: %w: %w", ErrNoSettlement, cerr)}
		}
		if _, ok := errors.AsType[*JobError](err); !ok {
			err = &JobError{ID: id, Err: fmt.Errorf("watch: %w", err)}
		}
	}
	return err
}

// watch is one run of [Client.WatchFrom].
type watch struct {
	c      *Client
	tenant string
	id     string
	onPage func(Page) error
	after  uint64 // the caller has seen everything stored up to it
	last   uint64 // the last sequence handled
	index  int64  // the last page index handled, -1 before the first
	first  int64  // index of the first page handled, -1 before
	seen   bool   // something of the job's results was read

	settled bool
	st      job.Settlement
}

func (w *watch) run(ctx context.Context) (job.Settlement, error) {
	msgs, unsubscribe, err := w.subscribe(ctx)
	if err != nil {
		return w.st, err
	}
	defer unsubscribe()
	return w.follow(ctx, msgs, true)
}

// subscribe subscribes to the republish of the job's results and returns once the server holds
// the interest: from then on nothing stored is missed.
func (w *watch) subscribe(ctx context.Context) (<-chan *nats.Msg, func(), error) {
	nc := w.c.js.Conn()
	// A channel of its own, small: a subscription's default buffer is 64 Ki messages (512 KiB
	// per watch). What overflows it is dropped by nats.go, and found again as a gap.
	msgs := make(chan *nats.Msg, watchBuffer)
	sub, err := nc.ChanSubscribe(w.c.subjects.Watch(w.tenant, w.id), msgs)
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, w.c.requestTimeout())
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, withCtx(ctx, fmt.Errorf("subscribe: %w", err))
	}
	return msgs, func() { _ = sub.Unsubscribe() }, nil
}

// follow handles what msgs delivers until the settlement. It first reads what was stored before
// the subscription, unless the caller subscribed before the job was published ([Client.Run]):
// then everything arrives on msgs, and a NATS user bound to its tenant, which may not make
// batched direct gets, follows its job all the same.
func (w *watch) follow(ctx context.Context, msgs <-chan *nats.Msg, catchUp bool) (job.Settlement, error) {
	if catchUp {
		if err := w.catchUp(ctx); err != nil || w.settled {
			return w.st, w.end(err)
		}
	}
	if catchUp && !w.seen {
		// Nothing of the job's results is stored: it must be queued, or unknown.
		_, err := w.c.lastMsg(ctx, w.c.subjects.JobsStream(), w.c.subjects.TenantJob(w.tenant, w.id))
		if errors.Is(err, protocol.ErrNoMessage) {
			return w.st, ErrNotFound
		}
		if err != nil {
			return w.st, err
		}
	}
	tick := time.NewTicker(backstop)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return w.st, ctx.Err()
		case <-tick.C:
			// What the subscription already delivered first: the backstop reads only what it
			// missed.
			err = w.drain(ctx, msgs)
			if err == nil && !w.settled {
				err = w.catchUp(ctx)
			}
		case m := <-msgs:
			err = w.live(ctx, m)
		}
		if err != nil || w.settled {
			return w.st, w.end(err)
		}
	}
}

// drain handles the messages msgs holds now, without waiting.
func (w *watch) drain(ctx context.Context, msgs <-chan *nats.Msg) error {
	for !w.settled {
		select {
		case m := <-msgs:
			if err := w.live(ctx, m); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// end adds ErrExpired to a watch from the start of a settled job whose first pages expired.
func (w *watch) end(err error) error {
	if err == nil && w.settled && w.after == 0 && w.st.Pages > 0 && w.first != 0 {
		return ErrExpired
	}
	return err
}

// live handles one republished message: in order it is handled at once, past a gap (a stored
// page that did not reach this watch) or as a settlement, what was stored is read again first.
func (w *watch) live(ctx context.Context, m *nats.Msg) error {
	sm, err := protocol.ParseDirectGet(m)
	if err != nil {
		return nil // not the stream's republish: anyone may publish to the subject
	}
	if sm.Sequence <= w.last {
		return nil
	}
	prev, _ := strconv.ParseUint(m.Header.Get(protocol.HeaderLastSequence), 10, 64)
	settlement := sm.Subject == w.c.subjects.Settled(w.tenant, w.id)
	if settlement && w.complete(sm) {
		return w.handle(sm)
	}
	if prev > w.last || settlement {
		if err := w.catchUp(ctx); err != nil {
			return err
		}
	}
	// A settlement is taken from the stream only, with everything stored before it. A page the
	// read did not reach (a lagging server answered it) is taken if nothing before it is missing;
	// otherwise the backstop reads again.
	if settlement || sm.Sequence <= w.last || prev > w.last {
		return nil
	}
	return w.handle(sm)
}

// complete reports whether this watch handled every page the settlement sm counts: pages are
// numbered from 0 without gaps, so the last index handled says it, and the settlement is taken
// without reading the stream again.
func (w *watch) complete(sm protocol.StoredMsg) bool {
	var counts struct {
		Pages int64 `json:"pages"`
	}
	if json.Unmarshal(sm.Data, &counts) != nil {
		return false
	}
	if w.index < 0 && w.after > 0 {
		return false // pages before after were the caller's: not known here
	}
	return w.index+1 == counts.Pages
}

// catchUp reads what the stream stored of the job after the last sequence handled, when its last
// stored message is one this watch has not handled: one direct get, and a batched read only
// then. It is also the backstop, every few seconds.
func (w *watch) catchUp(ctx context.Context) error {
	results := w.c.subjects.Results(w.tenant, w.id)
	sm, err := w.c.lastMsg(ctx, w.c.subjects.ResultsStream(), results)
	switch {
	case errors.Is(err, protocol.ErrNoMessage):
		return nil
	case err != nil:
		return err
	case sm.Sequence <= w.last:
		return nil
	}
	_, err = w.c.scan(ctx, w.c.subjects.ResultsStream(), results, w.last+1, func(sm protocol.StoredMsg) error {
		if w.settled {
			return nil
		}
		return w.handle(sm)
	})
	return err
}

// handle takes one stored message of the job, in stream order.
func (w *watch) handle(sm protocol.StoredMsg) error {
	if sm.Sequence <= w.last {
		return nil
	}
	w.last, w.seen = sm.Sequence, true
	if sm.Subject == w.c.subjects.Settled(w.tenant, w.id) {
		if err := json.Unmarshal(sm.Data, &w.st); err != nil {
			return fmt.Errorf("decode settlement: %w", err)
		}
		w.settled = true
		return nil
	}
	h := sm.Header
	p := Page{Stream: h.Get(job.HeaderStream), Data: sm.Data, Sequence: sm.Sequence}
	p.Index, _ = strconv.ParseInt(h.Get(job.HeaderPage), 10, 64)
	p.Offset, _ = strconv.ParseInt(h.Get(job.HeaderOffset), 10, 64)
	p.Attempt, _ = strconv.ParseInt(h.Get(job.HeaderAttempt), 10, 64)
	if p.Index <= w.index {
		return nil
	}
	w.index = p.Index
	if w.first < 0 {
		w.first = p.Index
	}
	if w.onPage == nil {
		return nil
	}
	return w.onPage(p)
}

// errStopped ends a watch whose iterator's consumer stopped ranging.
var errStopped = errors.New("stopped")

// Pages yields job id's pages in order, as [Client.Watch] sees them, and ends once the job has
// settled; [Client.Settlement] then returns the settlement. An error (ErrNotFound, ctx ending, …)
// is yielded once, last.
//
//	for p, err := range c.Pages(ctx, id) {
//		if err != nil {
//			return err
//		}
//		os.Stdout.Write(p.Data)
//	}
func (c *Client) Pages(ctx context.Context, id string) iter.Seq2[Page, error] {
	return func(yield func(Page, error) bool) {
		_, err := c.Watch(ctx, id, func(p Page) error {
			if !yield(p, nil) {
				return errStopped
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopped) {
			yield(Page{}, err)
		}
	}
}
