package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
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
}

// Run submits req to queue and waits for its settlement: [Client.Submit] then [Client.Watch].
// Like exec.Cmd.Run, it returns the settlement and, when the job did not succeed, st.Err() — a
// *[job.RejectError] or a *[job.OutcomeError]. When ctx ends first it returns an error wrapping
// [ErrNoSettlement] and ctx's error; the job goes on (cancel it with [Client.Cancel]). A req.ID
// that was submitted before runs nothing new: Run waits for that job's settlement.
func (c *Client) Run(ctx context.Context, queue string, req job.Request, o *RunOptions) (job.Settlement, error) {
	if o == nil {
		o = &RunOptions{}
	}
	sub, err := c.Submit(ctx, queue, req, &o.SubmitOptions)
	if err != nil {
		return job.Settlement{}, err
	}
	st, err := c.Watch(ctx, sub.ID, o.OnPage)
	if err != nil {
		return st, err
	}
	return st, st.Err()
}

// watchInactive is how long the server keeps the consumer of a watch that ended and was not
// deleted.
const watchInactive = 5 * time.Second

// dropConsumer deletes a finished watch's consumer at once. A stream holds at most 1,000
// consumers by default (nats-server's default_max_consumers), so every watch of the fleet —
// submit's, the gateway's waiting requests — counts against that; a consumer left to expire
// would keep its place for watchInactive after the watch.
func (c *Client) dropConsumer(ctx context.Context, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = c.js.DeleteConsumer(ctx, c.subjects.ResultsStream(), info.Name) // best effort: the threshold is the backstop
}

// Watch replays job id's pages from the start, calls onPage (which may be nil) for each as it is
// stored, and returns the settlement. It follows a running or waiting job live, and returns at
// once for a settled one. It never waits for a job the fleet does not know: an id it holds
// nothing of is [ErrNotFound], one whose results expired [ErrExpired]. When ctx ends first the
// error wraps both [ErrNoSettlement] and ctx.Err().
func (c *Client) Watch(ctx context.Context, id string, onPage func(Page) error) (job.Settlement, error) {
	return c.WatchFrom(ctx, id, 0, onPage)
}

// watchFailed is a watch of id that ended before it could follow the job: when ctx ended, it says
// so as every watch stopped before the settlement does, [ErrNoSettlement] and ctx's error.
func watchFailed(ctx context.Context, id string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("watch %s: %w: %w", id, ErrNoSettlement, cerr)
	}
	return fmt.Errorf("watch %s: %w", id, err)
}

// WatchFrom is [Client.Watch] that skips what the results stream stored up to sequence after, so
// that a watcher which saw the page of [Page.Sequence] after resumes with the next one.
func (c *Client) WatchFrom(ctx context.Context, id string, after uint64, onPage func(Page) error) (job.Settlement, error) {
	var st job.Settlement
	if !job.ValidID(id) {
		return st, fmt.Errorf("job id %q: %w", id, job.ErrInvalidID)
	}
	if _, _, err := c.lookup(ctx, id); err != nil {
		return st, watchFailed(ctx, id, err)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.subjects.Results(id)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// The server's backstop for a consumer that dropConsumer could not delete (nats.go's
		// default is 5 min). A live watch always has a pull pending.
		InactiveThreshold: watchInactive,
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := c.js.OrderedConsumer(ctx, c.subjects.ResultsStream(), cfg)
	if err != nil {
		return st, watchFailed(ctx, id, err)
	}
	defer c.dropConsumer(ctx, cons)
	it, err := cons.Messages()
	if err != nil {
		return st, watchFailed(ctx, id, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return st, fmt.Errorf("watch %s: %w: %w", id, ErrNoSettlement, cerr)
			}
			return st, fmt.Errorf("watch %s: %w", id, err)
		}
		if m.Headers().Get(headerMarkerReason) != "" {
			return st, fmt.Errorf("watch %s: %w", id, ErrExpired)
		}
		if m.Subject() == c.subjects.Settled(id) {
			if err := json.Unmarshal(m.Data(), &st); err != nil {
				return st, fmt.Errorf("decode settlement of %s: %w", id, err)
			}
			return st, nil
		}
		if onPage == nil {
			continue
		}
		h := m.Headers()
		p := Page{Stream: h.Get(job.HeaderStream), Data: m.Data()}
		if meta, err := m.Metadata(); err == nil {
			p.Sequence = meta.Sequence.Stream
		}
		p.Index, _ = strconv.ParseInt(h.Get(job.HeaderPage), 10, 64)
		p.Offset, _ = strconv.ParseInt(h.Get(job.HeaderOffset), 10, 64)
		p.Attempt, _ = strconv.ParseInt(h.Get(job.HeaderAttempt), 10, 64)
		if err := onPage(p); err != nil {
			return st, err
		}
	}
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
