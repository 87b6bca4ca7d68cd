package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/runfleet/runfleet/job"
)

// errBound is what a pager's writers return once a bound tripped; the provider then kills the
// sandbox.
var errBound = errors.New("output bound reached")

// publishPage stores one page; it is the job's fenced result chain.
type publishPage func(ctx context.Context, stream string, index, offset int64, data []byte) error

// pager cuts a job's stdout and stderr into pages and enforces OutputBytes (both streams
// together) and MaxPages. Pages are published under one lock, in order.
//
// The page policy (job.PageInterval): a stream's buffer is published as a page when it holds
// PageBytes, or when the oldest byte buffered in either stream has waited PageInterval; a time
// cut publishes both streams' buffers. So a watcher sees output within PageInterval of its
// writing, and however chatty a program is, time cuts come at most once per PageInterval:
// a line every 100 ms for 5 minutes makes about 1,500 pages (one per 200 ms: a line, the
// interval, the next line), within the default max_pages that job.PagesNeeded derives from the
// timeout.
type pager struct {
	publish publishPage
	b       job.Bounds
	kick    chan struct{} // told when a byte enters empty buffers

	mu     sync.Mutex
	buf    [2][]byte
	oldest time.Time // when the oldest buffered byte arrived; zero when nothing is buffered
	stored [2]int64  // bytes stored per stream: the next page's offset
	pages  int64
	limit  job.Reason // the bound that tripped, if any
	err    error      // first publish error; every later write fails with it
}

func newPager(publish publishPage, b job.Bounds) *pager {
	return &pager{publish: publish, b: b, kick: make(chan struct{}, 1)}
}

func streamName(s int) string {
	if s == 0 {
		return job.Stdout
	}
	return job.Stderr
}

// writer is one stream of a pager, as an io.Writer for the provider.
type writer struct {
	ctx context.Context
	p   *pager
	s   int
}

func (w writer) Write(b []byte) (int, error) { return w.p.write(w.ctx, w.s, b) }

// Writers returns the stdout and stderr writers; ctx bounds their publishing.
func (p *pager) Writers(ctx context.Context) (stdout, stderr writer) {
	return writer{ctx, p, 0}, writer{ctx, p, 1}
}

func (p *pager) buffered() int { return len(p.buf[0]) + len(p.buf[1]) }

func (p *pager) write(ctx context.Context, s int, b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, p.err
	}
	written := 0
	for len(b) > 0 {
		room := p.b.OutputBytes - p.stored[0] - p.stored[1] - int64(p.buffered())
		if room <= 0 {
			p.trip(ctx, job.ReasonOutputLimit)
			return written, p.err
		}
		n := min(int64(len(b)), room, p.b.PageBytes-int64(len(p.buf[s])))
		if p.buffered() == 0 {
			p.oldest = time.Now()
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
		p.buf[s] = append(p.buf[s], b[:n]...)
		b, written = b[n:], written+int(n)
		if int64(len(p.buf[s])) == p.b.PageBytes {
			if err := p.flush(ctx, s); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// trip stores what is buffered and stops the pager at bound r.
func (p *pager) trip(ctx context.Context, r job.Reason) {
	if p.flushAll(ctx) != nil {
		return
	}
	if p.limit == "" {
		p.limit = r
	}
	p.err = errBound
}

func (p *pager) flushAll(ctx context.Context) error {
	for s := range p.buf {
		if err := p.flush(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func (p *pager) flush(ctx context.Context, s int) error {
	if p.err != nil {
		return p.err
	}
	if len(p.buf[s]) == 0 {
		return nil
	}
	if p.pages >= p.b.MaxPages {
		p.buf = [2][]byte{}
		p.limit, p.err = job.ReasonPageLimit, errBound
		return p.err
	}
	data := p.buf[s]
	if err := p.publish(ctx, streamName(s), p.pages, p.stored[s], data); err != nil {
		p.err = err
		return err
	}
	p.pages++
	p.stored[s] += int64(len(data))
	p.buf[s] = nil
	if p.buffered() == 0 {
		p.oldest = time.Time{}
	}
	return nil
}

// due returns when the buffered output must be published, or zero when nothing is buffered or
// nothing more will be.
func (p *pager) due() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oldest.IsZero() || p.err != nil {
		return time.Time{}
	}
	return p.oldest.Add(job.PageInterval)
}

// cutIfDue publishes both streams' buffers if the oldest buffered byte is PageInterval old.
func (p *pager) cutIfDue(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.oldest.IsZero() && time.Since(p.oldest) >= job.PageInterval {
		_ = p.flushAll(ctx)
	}
}

// run makes the time cuts until ctx ends; publishCtx bounds their publishing.
func (p *pager) run(ctx, publishCtx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		for due := p.due(); !due.IsZero(); due = p.due() {
			t.Reset(time.Until(due))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p.cutIfDue(publishCtx)
		}
	}
}

// finish publishes what is left and returns the counts for the settlement.
func (p *pager) finish(ctx context.Context) (stdout, stderr, pages int64, limit job.Reason, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.flushAll(ctx)
	err = p.err
	if errors.Is(err, errBound) {
		err = nil
	}
	return p.stored[0], p.stored[1], p.pages, p.limit, err
}
