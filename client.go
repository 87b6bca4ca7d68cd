package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// Options configure a [Client]. Zero fields take the documented defaults.
type Options struct {
	Prefix  string        // default job.DefaultPrefix
	Streams StreamOptions // used when a stream is missing; Replicas also raises an existing one
}

// Client publishes jobs and follows their results.
type Client struct {
	js       jetstream.JetStream
	subjects job.Subjects
}

// NewClient returns a client on nc and creates the fleet's streams when they are missing.
func NewClient(ctx context.Context, nc *nats.Conn, o Options) (*Client, error) {
	s, err := job.NewSubjects(o.Prefix)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := EnsureStreams(ctx, js, s, o.Streams); err != nil {
		return nil, err
	}
	return &Client{js: js, subjects: s}, nil
}

// Subjects are the names this client publishes to and reads from.
func (c *Client) Subjects() job.Subjects { return c.subjects }

// Submitted is the outcome of a publish.
type Submitted struct {
	ID        string
	Sequence  uint64
	Duplicate bool // a job with this id was already stored; this publish added nothing
}

// Submit stores req on queue; an empty queue is job.DefaultQueue and an empty req.ID a new UUID.
// It returns once JetStream has stored the job.
func (c *Client) Submit(ctx context.Context, queue string, req job.Request) (Submitted, error) {
	if queue == "" {
		queue = job.DefaultQueue
	}
	if !job.ValidQueue(queue) {
		return Submitted{}, fmt.Errorf("queue %q: not a valid queue name", queue)
	}
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if !job.ValidID(req.ID) {
		return Submitted{}, fmt.Errorf("job id %q: not a valid id", req.ID)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Submitted{}, fmt.Errorf("encode job %s: %w", req.ID, err)
	}
	return c.SubmitRaw(ctx, queue, req.ID, body)
}

// SubmitRaw stores body as job id on queue without looking at it; the worker validates it. It is
// for tools and tests that need to send exactly the bytes they have.
func (c *Client) SubmitRaw(ctx context.Context, queue, id string, body []byte) (Submitted, error) {
	msg := nats.NewMsg(c.subjects.Jobs(queue))
	msg.Data = body
	if id != "" {
		msg.Header.Set(job.HeaderMsgID, id)
	}
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		return Submitted{}, fmt.Errorf("publish job %s: %w", id, err)
	}
	return Submitted{ID: id, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Cancel asks the fleet to cancel job id. A job not yet settled settles cancelled.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if !job.ValidID(id) {
		return fmt.Errorf("job id %q: not a valid id", id)
	}
	if _, err := c.js.Publish(ctx, c.subjects.Cancel(id), nil); err != nil {
		return fmt.Errorf("publish cancel %s: %w", id, err)
	}
	return nil
}

// Page is one stored piece of a job's output.
type Page struct {
	Stream   string // job.Stdout or job.Stderr
	Index    int64  // over the whole job
	Offset   int64  // within Stream
	Attempt  int64
	Data     []byte
	Sequence uint64 // in the results stream: where [Client.WatchFrom] resumes
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

// ErrNoSettlement is returned by [Client.Watch] when ctx ends before the job settled.
var ErrNoSettlement = errors.New("job not settled")

// Watch replays job id's pages from the start, calls onPage for each as it is stored, and returns
// the settlement. It follows a running job live, and returns at once for a settled one.
func (c *Client) Watch(ctx context.Context, id string, onPage func(Page) error) (job.Settlement, error) {
	return c.WatchFrom(ctx, id, 0, onPage)
}

// WatchFrom is [Client.Watch] that skips what the results stream stored up to sequence after, so
// that a watcher which saw the page of [Page.Sequence] after resumes with the next one.
func (c *Client) WatchFrom(ctx context.Context, id string, after uint64, onPage func(Page) error) (job.Settlement, error) {
	var st job.Settlement
	if !job.ValidID(id) {
		return st, fmt.Errorf("job id %q: not a valid id", id)
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
		return st, fmt.Errorf("watch %s: %w", id, err)
	}
	defer c.dropConsumer(ctx, cons)
	it, err := cons.Messages()
	if err != nil {
		return st, fmt.Errorf("watch %s: %w", id, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return st, fmt.Errorf("watch %s: %w", id, ErrNoSettlement)
			}
			return st, fmt.Errorf("watch %s: %w", id, err)
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

// Settlement returns job id's settlement as stored, without waiting: the raw JSON, so that fields
// this version of [job.Settlement] does not know yet reach the caller. It returns
// [ErrNoSettlement] while none is stored.
func (c *Client) Settlement(ctx context.Context, id string) (json.RawMessage, error) {
	if !job.ValidID(id) {
		return nil, fmt.Errorf("job id %q: not a valid id", id)
	}
	s, err := c.js.Stream(ctx, c.subjects.ResultsStream())
	if err != nil {
		return nil, fmt.Errorf("settlement of %s: %w", id, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, c.subjects.Settled(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("settlement of %s: %w", id, ErrNoSettlement)
	}
	if err != nil {
		return nil, fmt.Errorf("settlement of %s: %w", id, err)
	}
	return m.Data, nil
}
