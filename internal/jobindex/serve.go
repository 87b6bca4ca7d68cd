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

// Serve answers list and count requests on subjects.ListJobs() and subjects.CountJobs() until ctx
// ends, one at a time.
func (x *Index) Serve(ctx context.Context, nc *nats.Conn, subjects job.Subjects, log *slog.Logger) error {
	// Both subscriptions feed one channel, bounded by the subscriptions' pending limits.
	msgs := make(chan *nats.Msg, 64)
	for _, subject := range []string{subjects.ListJobs(), subjects.CountJobs()} {
		sub, err := nc.ChanQueueSubscribe(subject, queueGroup, msgs)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		defer sub.Unsubscribe()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			answer := x.answerList
			if m.Subject == subjects.CountJobs() {
				answer = x.answerCount
			}
			if err := answer(ctx, m); err != nil {
				log.Warn("answer a job index request", "subject", m.Subject, "err", err)
			}
		}
	}
}

func (x *Index) answerList(ctx context.Context, m *nats.Msg) error {
	var q job.ListQuery
	return answer(ctx, m, &q, func(ctx context.Context) (any, error) { return x.List(ctx, q) })
}

func (x *Index) answerCount(ctx context.Context, m *nats.Msg) error {
	var c job.CountQuery
	return answer(ctx, m, &c, func(ctx context.Context) (any, error) { return x.Count(ctx, c) })
}

// answer decodes m into in, and responds with what do returns: 400 for a bad query, 500 when the
// index cannot be read.
func answer(ctx context.Context, m *nats.Msg, in any, do func(context.Context) (any, error)) error {
	if err := json.Unmarshal(m.Data, in); err != nil {
		return respondError(m, 400, fmt.Errorf("%w: %w", job.ErrInvalidQuery, err))
	}
	ctx, cancel := context.WithTimeout(ctx, serveTimeout)
	defer cancel()
	out, err := do(ctx)
	if errors.Is(err, job.ErrInvalidQuery) {
		return respondError(m, 400, err)
	}
	if err != nil {
		respondError(m, 500, errors.New("the job index is unavailable"))
		return err
	}
	b, err := json.Marshal(out)
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
