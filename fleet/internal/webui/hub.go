package webui

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// maxFeedBytes bounds the output a feed keeps for late viewers; past it the page says so.
const maxFeedBytes = 4 << 20

// linger is how long a feed outlives its last viewer: a rendered page's live stream, which opens
// right after the render left, and a reload find the pages already read.
const linger = 10 * time.Second

// Watcher follows one job's pages to its settlement (runfleet.Client.Watch of the job's tenant).
type Watcher interface {
	Watch(ctx context.Context, tenant, id string, onPage func(runfleet.Page) error) (job.Settlement, error)
}

// tenantWatcher watches a job through a client of its tenant.
type tenantWatcher struct{ in *runfleet.Inspector }

func (t tenantWatcher) Watch(ctx context.Context, tenant, id string, onPage func(runfleet.Page) error) (job.Settlement, error) {
	c, err := t.in.Tenant(tenant)
	if err != nil {
		return job.Settlement{}, err
	}
	return c.Watch(ctx, id, onPage)
}

// hub runs one watch per job that open pages show, whatever the number of viewers, and hands its
// pages to each of them: the load on NATS follows the jobs shown, not the pages open.
type hub struct {
	w      Watcher
	mu     sync.Mutex
	feeds  map[string]*feed
	wg     sync.WaitGroup
	closed bool
}

// feed is one job's output as its watch delivered it.
type feed struct {
	mu       sync.Mutex
	pages    []runfleet.Page
	bytes    int
	cut      bool // pages past maxFeedBytes were not kept
	settled  *job.Settlement
	err      error
	viewers  map[chan struct{}]struct{}
	cancel   context.CancelFunc
	finished bool
	idle     *time.Timer // ends the feed a linger after its last viewer left; h.mu guards it
}

func newHub(w Watcher) *hub { return &hub{w: w, feeds: map[string]*feed{}} }

// errClosed ends the feeds of a hub that is closing.
var errClosed = errors.New("the gateway is shutting down")

// close ends every watch and waits for them; a view after it gets a finished feed.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	for _, f := range h.feeds {
		if f.idle != nil {
			f.idle.Stop()
		}
		f.cancel()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// view registers a viewer of tenant's job id: its channel is signalled whenever the feed grows or
// ends. Call leave when done.
func (h *hub) view(tenant, id string) (f *feed, notify chan struct{}, leave func()) {
	notify = make(chan struct{}, 1)
	key := tenant + "/" + id
	h.mu.Lock()
	f = h.feeds[key]
	if f == nil {
		ctx, cancel := context.WithCancel(context.Background())
		f = &feed{viewers: map[chan struct{}]struct{}{}, cancel: cancel}
		h.feeds[key] = f
		if h.closed {
			cancel()
			f.finished, f.err = true, errClosed
		} else {
			h.wg.Go(func() { h.follow(ctx, tenant, id, f) })
		}
	}
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	f.mu.Lock()
	f.viewers[notify] = struct{}{}
	f.mu.Unlock()
	h.mu.Unlock()
	return f, notify, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		f.mu.Lock()
		delete(f.viewers, notify)
		last := len(f.viewers) == 0
		f.mu.Unlock()
		if last && h.feeds[key] == f && !h.closed {
			f.idle = time.AfterFunc(linger, func() { h.drop(key, f) })
		}
	}
}

// drop ends feed f of the job key names unless a viewer came back to it meanwhile.
func (h *hub) drop(key string, f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.mu.Lock()
	viewed := len(f.viewers) > 0
	f.mu.Unlock()
	if !viewed && h.feeds[key] == f {
		delete(h.feeds, key)
		f.cancel()
	}
}

func (h *hub) follow(ctx context.Context, tenant, id string, f *feed) {
	st, err := h.w.Watch(ctx, tenant, id, func(p runfleet.Page) error {
		f.mu.Lock()
		if f.bytes+len(p.Data) > maxFeedBytes {
			f.cut = true
		} else {
			f.pages = append(f.pages, p)
			f.bytes += len(p.Data)
		}
		f.signal()
		f.mu.Unlock()
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished = true
	if err == nil {
		f.settled = &st
	} else if !errors.Is(err, context.Canceled) {
		f.err = err
	}
	f.signal()
}

// signal tells every viewer something changed; f.mu is held.
func (f *feed) signal() {
	for c := range f.viewers {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// state is a viewer's copy of the feed past its first `from` pages.
type state struct {
	pages    []runfleet.Page
	next     int
	cut      bool
	settled  *job.Settlement
	err      error
	finished bool
}

func (f *feed) since(from int) state {
	f.mu.Lock()
	defer f.mu.Unlock()
	from = min(from, len(f.pages))
	return state{pages: append([]runfleet.Page(nil), f.pages[from:]...), next: len(f.pages), cut: f.cut,
		settled: f.settled, err: f.err, finished: f.finished}
}

// settle waits up to d for the feed to end, so that a page rendered without JavaScript shows a
// job that ends quickly whole.
func (f *feed) settle(ctx context.Context, notify chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		f.mu.Lock()
		done := f.finished
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-notify:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
