package jobindex

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/reply"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// serveTimeout bounds one answer; the client waits longer than this.
const serveTimeout = 5 * time.Second

// queueGroup spreads list requests over the workers that serve the index: one answers each.
const queueGroup = "runfleet-index"

// Serve answers list, count and tenant usage requests on subjects.ListJobs(), subjects.CountJobs()
// and protocol.UsageSubject(subjects) until ctx ends, then waits for the answers under way.
func (x *Index) Serve(ctx context.Context, nc *nats.Conn, subjects job.Subjects, log *slog.Logger) error {
	s, err := reply.Start(ctx, nc, reply.Config{
		Name:       queueGroup,
		QueueGroup: queueGroup,
		Endpoints: []reply.Endpoint{
			{Name: "list", Subject: subjects.ListJobs(), Answer: reply.JSON(x.List)},
			{Name: "count", Subject: subjects.CountJobs(), Answer: reply.JSON(x.Count)},
			{Name: "usage", Subject: protocol.UsageSubject(subjects), Answer: reply.JSON(x.usage)},
		},
		Timeout:  serveTimeout,
		Classify: classify,
		Log:      log,
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return s.Stop()
}

// classify answers 400 for a bad query, 500 when the index cannot be read; the index's own
// error stays in the worker's log.
func classify(err error) *protocol.ServiceError {
	if errors.Is(err, job.ErrInvalidQuery) {
		return &protocol.ServiceError{Code: 400, Message: err.Error()}
	}
	return &protocol.ServiceError{Code: 500, Message: "the job index is unavailable"}
}
