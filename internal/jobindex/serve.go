package jobindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
)

// serveTimeout bounds one answer; the client waits longer than this.
const serveTimeout = 5 * time.Second

// queueGroup spreads list requests over the workers that serve the index: one answers each.
const queueGroup = "runfleet-index"

// Serve answers list requests on subjects.ListJobs() until ctx ends, one at a time.
func (x *Index) Serve(ctx context.Context, nc *nats.Conn, subjects job.Subjects, log *slog.Logger) error {
	sub, err := nc.QueueSubscribeSync(subjects.ListJobs(), queueGroup)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subjects.ListJobs(), err)
	}
	defer sub.Unsubscribe()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("serve %s: %w", subjects.ListJobs(), err)
		}
		if err := x.answer(ctx, m); err != nil {
			log.Warn("answer a list request", "err", err)
		}
	}
}

func (x *Index) answer(ctx context.Context, m *nats.Msg) error {
	var q job.ListQuery
	if err := json.Unmarshal(m.Data, &q); err != nil {
		return respondError(m, 400, fmt.Errorf("%w: %w", job.ErrInvalidQuery, err))
	}
	ctx, cancel := context.WithTimeout(ctx, serveTimeout)
	defer cancel()
	list, err := x.List(ctx, q)
	if errors.Is(err, job.ErrInvalidQuery) {
		return respondError(m, 400, err)
	}
	if err != nil {
		respondError(m, 500, errors.New("the job index is unavailable"))
		return err
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return m.Respond(b)
}

// respondError answers with the headers of the NATS services convention.
func respondError(m *nats.Msg, code int, err error) error {
	r := nats.NewMsg(m.Reply)
	r.Header.Set("Nats-Service-Error", err.Error())
	r.Header.Set("Nats-Service-Error-Code", fmt.Sprint(code))
	return m.RespondMsg(r)
}
