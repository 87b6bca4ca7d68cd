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
	"github.com/runfleet/runfleet/fleet/internal/sse"
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
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
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
	// A job its tenant does not hold is answered before the stream starts, as every route does.
	lctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	_, err := c.Lookup(lctx, id)
	cancel()
	switch {
	case errors.Is(err, runfleet.ErrNotFound):
		b := lookupFailure(id, err)
		writeError(w, http.StatusNotFound, b.Reason, b.Detail)
		return
	case err != nil:
		g.log.Warn("look up a job", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the job; retry later")
		return
	}
	if after > 0 {
		ok, err := g.pageOf(r.Context(), c.Tenant(), id, after)
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
	s, err := sse.Start(w)
	if err != nil {
		return
	}
	if s.Comment("job "+id) != nil {
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
				if s.Comment("keep-alive") != nil {
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
	st, err := c.WatchFrom(ctx, id, after, func(p runfleet.Page) error {
		b, err := json.Marshal(pageEvent{Stream: p.Stream, Index: p.Index, Offset: p.Offset, Data: p.Data})
		if err != nil {
			return err
		}
		return s.Send(sse.Event{ID: strconv.FormatUint(p.Sequence, 10), Name: "page", Data: string(b)})
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
		s.Send(sse.Event{Name: "error", Data: mustJSON(lookupFailure(id, err))})
		return
	case err != nil:
		g.log.Warn("events", "job_id", id, "err", err)
		s.Send(sse.Event{Name: "error", Data: mustJSON(errorBody{Reason: watchFailure(err), Detail: "could not follow the job; reconnect with Last-Event-ID"})})
		return
	}
	s.Send(sse.Event{Name: "settled", Data: mustJSON(st)})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return `{}`
	}
	return string(b)
}

// pageOf reports whether the results stream's message at seq is a page of tenant's job id: a
// Last-Event-ID after which the stream resumes. Its settlement, a later message or another job's
// is not, and a wait for what follows it would never end.
func (g *Gateway) pageOf(ctx context.Context, tenant, id string, seq uint64) (bool, error) {
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
	return m.Subject == g.subjects.Page(tenant, id), nil
}
