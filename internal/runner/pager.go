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

// pagePause is how long output may rest in a partial page before it is published anyway, so a
// slow program's lines arrive while it runs.
const pagePause = 50 * time.Millisecond

// publishPage stores one page; it is the job's fenced result chain.
type publishPage func(ctx context.Context, stream string, index, offset int64, data []byte) error

// pager cuts a job's stdout and stderr into pages of at most PageBytes, and enforces OutputBytes
// (both streams together) and MaxPages. Pages are published under one lock, in order.
type pager struct {
	publish publishPage
	b       job.Bounds

	mu      sync.Mutex
	buf     [2][]byte
	stored  [2]int64 // bytes stored per stream: the next page's offset
	pages   int64
	limit   job.Reason // the bound that tripped, if any
	err     error      // first publish error; every later write fails with it
	lastAdd time.Time
}

func newPager(publish publishPage, b job.Bounds) *pager {
	return &pager{publish: publish, b: b}
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

func (p *pager) write(ctx context.Context, s int, b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, p.err
	}
	written := 0
	for len(b) > 0 {
		room := p.b.OutputBytes - p.stored[0] - p.stored[1] - int64(len(p.buf[0])+len(p.buf[1]))
		if room <= 0 {
			p.trip(ctx, job.ReasonOutputLimit)
			return written, p.err
		}
		n := min(int64(len(b)), room, p.b.PageBytes-int64(len(p.buf[s])))
		p.buf[s] = append(p.buf[s], b[:n]...)
		b, written = b[n:], written+int(n)
		if int64(len(p.buf[s])) == p.b.PageBytes {
			if err := p.flush(ctx, s); err != nil {
				return written, err
			}
		}
	}
	p.lastAdd = time.Now()
	return written, nil
}

// trip stores what is buffered and stops the pager at bound r.
func (p *pager) trip(ctx context.Context, r job.Reason) {
	for s := range p.buf {
		if p.flush(ctx, s) != nil {
			return
		}
	}
	if p.limit == "" {
		p.limit = r
	}
	p.err = errBound
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
	return nil
}

// flushIdle publishes partial pages that have rested for pagePause.
func (p *pager) flushIdle(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.lastAdd) < pagePause {
		return
	}
	for s := range p.buf {
		_ = p.flush(ctx, s)
	}
}

// run flushes idle pages until ctx ends.
func (p *pager) run(ctx, publishCtx context.Context) {
	t := time.NewTicker(pagePause)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.flushIdle(publishCtx)
		}
	}
}

// finish publishes what is left and returns the counts for the settlement.
func (p *pager) finish(ctx context.Context) (stdout, stderr, pages int64, limit job.Reason, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.buf {
		_ = p.flush(ctx, s)
	}
	err = p.err
	if errors.Is(err, errBound) {
		err = nil
	}
	return p.stored[0], p.stored[1], p.pages, p.limit, err
}
