package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
)

// keepAlive is how often an event stream without news gets a comment line, so that proxies and
// load balancers do not close it as idle.
const keepAlive = 15 * time.Second

// pageEvent is the data of an `event: page`.
type pageEvent struct {
	Stream string `json:"stream"`
	Index  int64  `json:"index"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"` // base64 in JSON
}

// events streams job id's pages as server-sent events, then its settlement. The id of a page
// event is its sequence in the results stream, so that a client that reconnects with
// Last-Event-ID resumes after it, on any gateway.
func (g *Gateway) events(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok || !g.owned(w, r, id) {
		return
	}
	var after uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_last_event_id", "Last-Event-ID: want the id of an event this route sent")
			return
		}
		after = n
	}
	if !g.nc.IsConnected() {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the fleet's NATS is unreachable; retry later")
		return
	}
	if after > 0 {
		ok, err := g.pageOf(r.Context(), id, after)
		switch {
		case err != nil:
			g.log.Warn("read Last-Event-ID", "job_id", id, "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the results stream; retry later")
			return
		case !ok:
			writeError(w, http.StatusBadRequest, "invalid_last_event_id", fmt.Sprintf("Last-Event-ID %d is not a page of job %s: nothing follows it (the job settled, or the id is another job's)", after, id))
			return
		}
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	// The watch writes events and the keep-alive writes comments: one writer at a time.
	var mu sync.Mutex
	send := func(format string, args ...any) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(": job %s\n\n", id); err != nil {
		return
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(keepAlive)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if send(": keep-alive\n\n") != nil {
					return
				}
			}
		}
	})
	defer wg.Wait()
	defer close(stop)

	defer g.metrics.watching()()
	ctx, cancel := context.WithTimeout(r.Context(), g.o.MaxWait)
	defer cancel()
	// A write blocked on a client that stopped reading ends with the stream's time too.
	defer context.AfterFunc(ctx, func() { endWrites(w) })()
	st, err := g.client.WatchFrom(ctx, id, after, func(p runfleet.Page) error {
		b, err := json.Marshal(pageEvent{Stream: p.Stream, Index: p.Index, Offset: p.Offset, Data: p.Data})
		if err != nil {
			return err
		}
		return send("id: %d\nevent: page\ndata: %s\n\n", p.Sequence, b)
	})
	switch {
	case errors.Is(err, runfleet.ErrNoSettlement), r.Context().Err() != nil, ctx.Err() != nil:
		// The client left, or MaxWait passed (a write blocked then fails): it resumes with
		// Last-Event-ID.
		return
	case errors.Is(err, errWritesEnded), errors.Is(err, os.ErrDeadlineExceeded):
		g.log.Info("events: client not reading, let go", "job_id", id)
		return
	case errors.Is(err, runfleet.ErrNotFound), errors.Is(err, runfleet.ErrExpired):
		send("event: error\ndata: %s\n\n", mustJSON(lookupFailure(id, err)))
		return
	case err != nil:
		g.log.Warn("events", "job_id", id, "err", err)
		send("event: error\ndata: %s\n\n", mustJSON(errorBody{Reason: watchFailure(err), Detail: "could not follow the job; reconnect with Last-Event-ID"}))
		return
	}
	send("event: settled\ndata: %s\n\n", mustJSON(st))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{}`)
	}
	return b
}

// pageOf reports whether the results stream's message at seq is a page of job id: a
// Last-Event-ID after which the stream resumes. Its settlement, a later message or another job's
// is not, and a wait for what follows it would never end.
func (g *Gateway) pageOf(ctx context.Context, id string, seq uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	s, err := g.js.Stream(ctx, g.subjects.ResultsStream())
	if err != nil {
		return false, fmt.Errorf("results stream: %w", err)
	}
	m, err := s.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("results message %d: %w", seq, err)
	}
	return m.Subject == g.subjects.Page(id), nil
}
