package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// ErrConflict means another writer stored something of the job first; the writer that meets it
// must stop writing.
var ErrConflict = errors.New("result conflict")

// Results stores pages, settlements and rejection records.
type Results struct {
	js       jetstream.JetStream
	subjects job.Subjects

	mu      sync.Mutex
	streams map[string]jetstream.Stream // looked up once: each lookup is a round trip
}

// NewResults returns the result log of the fleet named by subjects.
func NewResults(js jetstream.JetStream, subjects job.Subjects) *Results {
	return &Results{js: js, subjects: subjects, streams: map[string]jetstream.Stream{}}
}

// stream returns the handle of stream name, looking it up on first use only.
func (r *Results) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.streams[name]; ok {
		return s, nil
	}
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	r.streams[name] = s
	return s, nil
}

// pageTTL is how long the results stream keeps a page (job.MetadataPageTTL): pages expire
// before the settlement, which lives for the job's record. Zero (no TTL: the stream's MaxAge)
// when the stream names none or cannot be read.
func (r *Results) pageTTL(ctx context.Context) time.Duration {
	s, err := r.stream(ctx, r.subjects.ResultsStream())
	if err != nil {
		return 0
	}
	ttl, err := time.ParseDuration(s.CachedInfo().Config.Metadata[job.MetadataPageTTL])
	if err != nil || ttl < time.Second {
		return 0
	}
	return ttl
}

func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Chain is the fenced sequence of one attempt's writes to a job's results.
type Chain struct {
	r           *Results
	tenant, id  string
	attempt     int64
	traceparent string
	last        uint64 // stream sequence of this chain's last write, 0 before the first
	broken      bool
}

// Chain starts the writes of attempt to tenant's job id's results. The chain expects nothing
// stored yet.
func (r *Results) Chain(tenant, id string, attempt int64, traceparent string) *Chain {
	return &Chain{r: r, tenant: tenant, id: id, attempt: attempt, traceparent: traceparent}
}

func (c *Chain) msg(subject string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(job.HeaderJobID, c.id)
	m.Header.Set(job.HeaderAttempt, strconv.FormatInt(c.attempt, 10))
	if c.traceparent != "" {
		m.Header.Set(job.HeaderTraceparent, c.traceparent)
	}
	return m
}

func (c *Chain) publish(ctx context.Context, m *nats.Msg) error {
	if c.broken {
		return fmt.Errorf("job %s attempt %d: %w", c.id, c.attempt, ErrConflict)
	}
	ack, err := publishRetry(ctx, c.r.js, m, jetstream.WithExpectLastSequenceForSubject(c.last, c.r.subjects.Results(c.tenant, c.id)))
	if conflict(err) {
		if seq, ok := c.stored(ctx, m); ok {
			c.last = seq
			return nil
		}
		c.broken = true
		return fmt.Errorf("job %s attempt %d: %w", c.id, c.attempt, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	c.last = ack.Sequence
	return nil
}

// Retries of a result write: each try waits at most tryTimeout for its ack, and the pause between
// tries doubles from firstBackoff to maxBackoff. A stream leader election after a node loss takes
// a few seconds (3.5–6.6 s measured), which the caller's context must outlast.
const (
	tryTimeout   = 2 * time.Second
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = time.Second
)

// publishRetry publishes m until JetStream acks it or ctx ends, retrying what a node loss or a
// leader election causes (no response, timeouts, 503 "no leader" errors). A try may be stored
// although its ack was lost; m's Nats-Msg-Id lets the caller recognise it (see [Chain.stored]).
func publishRetry(ctx context.Context, js jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	backoff := firstBackoff
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		ack, err := js.PublishMsg(tctx, m, opts...)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return ack, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (retried until: %w)", err, context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// errCodeMsgIDInProcess is JetStream's 409 "duplicate message id is in process": on a cluster, a
// write whose Nats-Msg-Id an earlier try of it is still proposing. Tried again once that try is
// stored, it is acked as a duplicate of it, or refused by the fence and recognised as stored.
const errCodeMsgIDInProcess jetstream.ErrorCode = 10158

// retryable tells a write that may succeed when tried again from one that never will: an API
// error is final unless it is a 503 (the stream or the cluster has no leader at the moment) or a
// message id still in process.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 || apiErr.ErrorCode == errCodeMsgIDInProcess
	}
	return !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrMaxPayload)
}

// stored reports whether m is the last write stored for the job, with its sequence: then a
// refusal by the fence was a retry meeting its own earlier try, whose ack was lost. (The stream
// checks the expected sequence before duplicates, so such a retry is refused, not acked as a
// duplicate.)
func (c *Chain) stored(ctx context.Context, m *nats.Msg) (uint64, bool) {
	s, err := c.r.stream(ctx, c.r.subjects.ResultsStream())
	if err != nil {
		return 0, false
	}
	last, err := s.GetLastMsgForSubject(ctx, c.r.subjects.Results(c.tenant, c.id))
	if err != nil || last.Header.Get(job.HeaderMsgID) != m.Header.Get(job.HeaderMsgID) {
		return 0, false
	}
	return last.Sequence, true
}

// msgID names one write of one attempt, so that its retries are deduplicated by the stream. It
// names the tenant too: the stream's duplicate window spans every job.
func (c *Chain) msgID(what string) string {
	return c.tenant + "." + c.id + "." + strconv.FormatInt(c.attempt, 10) + "." + what
}

// Page stores one output page, with the results stream's page TTL when it names one.
func (c *Chain) Page(ctx context.Context, stream string, index, offset int64, data []byte) error {
	m := c.msg(c.r.subjects.Page(c.tenant, c.id), data)
	if ttl := c.r.pageTTL(ctx); ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	m.Header.Set(job.HeaderStream, stream)
	m.Header.Set(job.HeaderPage, strconv.FormatInt(index, 10))
	m.Header.Set(job.HeaderOffset, strconv.FormatInt(offset, 10))
	m.Header.Set(job.HeaderMsgID, c.msgID("page."+strconv.FormatInt(index, 10)))
	return c.publish(ctx, m)
}

// Settle stores the settlement as the chain's last write. Its detail is clipped, so that no
// settlement is too large to store.
func (c *Chain) Settle(ctx context.Context, st job.Settlement) error {
	st.Detail = job.ClipDetail(st.Detail)
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode settlement: %w", err)
	}
	m := c.msg(c.r.subjects.Settled(c.tenant, c.id), body)
	m.Header.Set(job.HeaderMsgID, c.msgID("settled"))
	return c.publish(ctx, m)
}

// Stored is what earlier attempts stored of one job's results.
type Stored struct {
	Pages       int64
	StdoutBytes int64
	StderrBytes int64
	Settled     bool // a settlement is stored: the job is over
}

// Resume reads what is stored of tenant's job id's results and returns attempt's chain after it: the
// chain's first write is refused if anything more is stored in between, so a settlement it
// stores counts exactly what the earlier attempts stored (G4). For a job nothing was stored of,
// it is [Results.Chain].
func (r *Results) Resume(ctx context.Context, tenant, id string, attempt int64, traceparent string) (*Chain, Stored, error) {
	var got Stored
	c := r.Chain(tenant, id, attempt, traceparent)
	s, err := r.stream(ctx, r.subjects.ResultsStream())
	if err != nil {
		return nil, got, err
	}
	last, err := s.GetLastMsgForSubject(ctx, r.subjects.Results(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return c, got, nil
	}
	if err != nil {
		return nil, got, fmt.Errorf("results of %s: %w", id, err)
	}
	// The server holds a bounded number of consumers per stream: this one leaves as soon as the
	// read is done, and after a few seconds at the most if the worker dies first.
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subjects.Results(tenant, id)},
		InactiveThreshold: 5 * time.Second})
	if err != nil {
		return nil, got, fmt.Errorf("read results of %s: %w", id, err)
	}
	defer func() { _ = s.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	// Fetch exactly what is pending: a batch asked larger than that waits out its MaxWait.
	pending := cons.CachedInfo().NumPending
	for c.last < last.Sequence {
		if pending == 0 {
			return nil, got, fmt.Errorf("read results of %s: stopped at sequence %d of %d", id, c.last, last.Sequence)
		}
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return nil, got, fmt.Errorf("read results of %s: %w", id, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, got, fmt.Errorf("read results of %s: %w", id, err)
			}
			c.last, pending = meta.Sequence.Stream, meta.NumPending
			switch {
			case m.Subject() == r.subjects.Settled(tenant, id):
				got.Settled = true
			case m.Headers().Get(job.HeaderStream) == job.Stderr:
				got.Pages++
				got.StderrBytes += int64(len(m.Data()))
			default:
				got.Pages++
				got.StdoutBytes += int64(len(m.Data()))
			}
		}
		if err := batch.Error(); err != nil {
			return nil, got, fmt.Errorf("read results of %s: %w", id, err)
		}
		if n == 0 {
			return nil, got, fmt.Errorf("read results of %s: stopped at sequence %d of %d", id, c.last, last.Sequence)
		}
	}
	return c, got, nil
}

// ErrNotSettled is returned by [Results.Settlement] for a job with no stored settlement.
var ErrNotSettled = errors.New("not settled")

// Settlement returns tenant's job id's stored settlement.
func (r *Results) Settlement(ctx context.Context, tenant, id string) (job.Settlement, error) {
	var st job.Settlement
	s, err := r.stream(ctx, r.subjects.ResultsStream())
	if err != nil {
		return st, err
	}
	m, err := s.GetLastMsgForSubject(ctx, r.subjects.Settled(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st, fmt.Errorf("job %s: %w", id, ErrNotSettled)
	}
	if err != nil {
		return st, fmt.Errorf("settlement of %s: %w", id, err)
	}
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return st, fmt.Errorf("decode settlement of %s: %w", id, err)
	}
	return st, nil
}

// Reject stores a record for a job message whose id could not be read.
func (r *Results) Reject(ctx context.Context, rec job.Rejection) error {
	rec.Detail = job.ClipDetail(rec.Detail)
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := r.js.Publish(ctx, r.subjects.Rejected(), body); err != nil {
		return fmt.Errorf("publish rejection of seq %d: %w", rec.StreamSeq, err)
	}
	return nil
}

// Cancelled reports whether a cancel request for tenant's job id is stored that was stored at or after
// queued, when the job's message was. A cancel stored before the job it names was for no job:
// it must not cancel one published later with the same id (a mistyped or reused id would be
// poisoned for the control stream's MaxAge).
func (r *Results) Cancelled(ctx context.Context, tenant, id string, queued time.Time) (bool, error) {
	s, err := r.stream(ctx, r.subjects.ControlStream())
	if err != nil {
		return false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, r.subjects.Cancel(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cancel of %s: %w", id, err)
	}
	return !m.Time.Before(queued), nil
}

// GatePassedError means an earlier attempt of the job stored its dispatch marker: its code may
// have reached a sandbox.
type GatePassedError struct {
	ID      string
	Attempt int64 // the attempt that passed the gate
}

func (e *GatePassedError) Error() string {
	return fmt.Sprintf("job %s: attempt %d passed the dispatch gate", e.ID, e.Attempt)
}

// GateHolder reads the dispatch marker of tenant's job id, whose message was stored at queued:
// the attempt that stored it, and whether one is stored. A job with no marker may have been
// dispatched by a worker of protocol version 2, whose marker named the id alone: such a marker
// counts when it was stored after the job's message (docs/protocol.md, "From version 2").
func (r *Results) GateHolder(ctx context.Context, tenant, id string, queued time.Time) (int64, bool, error) {
	s, err := r.stream(ctx, r.subjects.ResultsStream())
	if err != nil {
		return 0, false, fmt.Errorf("read marker %s: %w", id, err)
	}
	last, err := s.GetLastMsgForSubject(ctx, r.subjects.Dispatched(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		last, err = s.GetLastMsgForSubject(ctx, r.subjects.DispatchedV2(id))
		if err == nil && last.Time.Before(queued) {
			err = jetstream.ErrMsgNotFound
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read marker %s: %w", id, err)
	}
	by, _ := strconv.ParseInt(last.Header.Get(job.HeaderAttempt), 10, 64)
	return by, true, nil
}

// PassGate stores attempt's dispatch marker for tenant's job id, before any of the job's data may reach a
// sandbox. The marker's subject holds one message for good: the first attempt to store it is the
// only one whose code may run, and every other attempt's store is refused (the stream's expected
// sequence per subject, 0), so the marker decides "may have run" where the Redis record cannot (a
// failover that lost it, a reservation no replica confirmed). It fails with a *GatePassedError
// when another attempt's marker is stored; a retry of this attempt's own store is no error.
func (r *Results) PassGate(ctx context.Context, tenant, id string, attempt int64, worker string) error {
	m := nats.NewMsg(r.subjects.Dispatched(tenant, id))
	m.Header.Set(job.HeaderJobID, id)
	m.Header.Set(job.HeaderAttempt, strconv.FormatInt(attempt, 10))
	// The worker too: an attempt is its generation on one worker, and the marker of another
	// worker's attempt of the same generation is not this one's.
	m.Header.Set(job.HeaderMsgID, tenant+"."+id+"."+strconv.FormatInt(attempt, 10)+".gate."+worker)
	_, err := publishRetry(ctx, r.js, m, jetstream.WithExpectLastSequencePerSubject(0))
	if !conflict(err) {
		if err != nil {
			return fmt.Errorf("pass gate %s: %w", id, err)
		}
		return nil
	}
	s, serr := r.stream(ctx, r.subjects.ResultsStream())
	if serr != nil {
		return fmt.Errorf("pass gate %s: %w", id, serr)
	}
	last, gerr := s.GetLastMsgForSubject(ctx, m.Subject)
	if gerr != nil {
		return fmt.Errorf("pass gate %s: read marker: %w", id, gerr)
	}
	if last.Header.Get(job.HeaderMsgID) == m.Header.Get(job.HeaderMsgID) {
		return nil
	}
	by, _ := strconv.ParseInt(last.Header.Get(job.HeaderAttempt), 10, 64)
	return &GatePassedError{ID: id, Attempt: by}
}
