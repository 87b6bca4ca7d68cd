package runfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// jobState is what the fleet holds of a job that it knows.
type jobState int

const (
	stateQueued  jobState = iota + 1 // its message waits in the jobs stream
	stateRunning                     // pages are stored, no settlement yet
	stateSettled                     // its settlement is stored
)

// headerMarkerReason is set by nats-server on the marker it leaves on a subject whose last
// message it removed (StreamConfig.SubjectDeleteMarkerTTL).
const headerMarkerReason = "Nats-Marker-Reason"

// lookup says what the fleet holds of job id, and the settlement's JSON when it is settled. It
// returns [ErrNotFound] or [ErrExpired] for a job it cannot find.
//
// The results are read first, then the jobs stream, then the results again: a job's message is
// acked (and so leaves the jobs stream) only after its settlement is stored, so a job that left
// the queue between the first two reads is found settled by the third.
func (c *Client) lookup(ctx context.Context, id string) (jobState, json.RawMessage, error) {
	st, raw, err := c.stored(ctx, id)
	if err != nil || st != 0 {
		return st, raw, err
	}
	queued, err := c.queued(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	if queued {
		return stateQueued, nil, nil
	}
	st, raw, err = c.stored(ctx, id)
	if err != nil || st != 0 {
		return st, raw, err
	}
	return 0, nil, ErrNotFound
}

// stored looks for job id's settlement, then for its pages, in the results stream. It returns
// 0 when neither is stored.
func (c *Client) stored(ctx context.Context, id string) (jobState, json.RawMessage, error) {
	s, err := c.js.Stream(ctx, c.subjects.ResultsStream())
	if err != nil {
		return 0, nil, withCtx(ctx, fmt.Errorf("results stream: %w", err))
	}
	for _, q := range []struct {
		subject string
		state   jobState
	}{{c.subjects.Settled(id), stateSettled}, {c.subjects.Page(id), stateRunning}} {
		m, err := s.GetLastMsgForSubject(ctx, q.subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, nil, withCtx(ctx, err)
		}
		if m.Header.Get(headerMarkerReason) != "" {
			return 0, nil, ErrExpired
		}
		return q.state, m.Data, nil
	}
	return 0, nil, nil
}

// queued reports whether a message of job id is kept in the jobs stream, on any queue and
// tenant: one direct get of the last message on the id's subjects.
func (c *Client) queued(ctx context.Context, id string) (bool, error) {
	s, err := c.js.Stream(ctx, c.subjects.JobsStream())
	if err != nil {
		return false, withCtx(ctx, fmt.Errorf("jobs stream: %w", err))
	}
	_, err = s.GetLastMsgForSubject(ctx, c.subjects.JobByID(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, withCtx(ctx, err)
	}
	return true, nil
}

// withCtx makes err match ctx's error too when ctx ended, whatever the library returned.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}
