package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// Job is what a job message's subject and header say of it.
type Job struct {
	Queue, Tenant, ID string
}

// ParseJob reads a delivered job message. A message it cannot serve — a subject that does not
// parse, a Nats-Msg-Id that names another id — is an error with the rejection to record: no
// settlement subject can name it.
func ParseJob(s job.Subjects, m jetstream.Msg) (Job, *job.Rejection) {
	q, tenant, id, err := s.ParseJob(m.Subject())
	if err != nil {
		reason := job.ReasonInvalidSubject
		if errors.Is(err, job.ErrInvalidID) {
			reason = job.ReasonInvalidID
		}
		return Job{}, &job.Rejection{Subject: m.Subject(), Reason: reason, Detail: err.Error()}
	}
	// Version-3 publishers send no Nats-Msg-Id (the jobs stream's duplicate window spans every
	// tenant); one that is sent must name the subject's id, as version 2 required.
	if h := m.Headers().Get(job.HeaderMsgID); h != "" && h != id {
		return Job{}, &job.Rejection{Subject: m.Subject(), Reason: job.ReasonIDMismatch,
			Detail: fmt.Sprintf("Nats-Msg-Id %q is not the subject's job id", h)}
	}
	return Job{Queue: q, Tenant: tenant, ID: id}, nil
}

// Remove deletes the job message of sequence seq from the jobs stream. The stream keeps what it
// was not told to delete (Limits retention): an ack does not remove a message, and a rejected one
// must not stay where a lookup by id finds it.
func (r *Results) Remove(ctx context.Context, seq uint64) error {
	s, err := r.stream(ctx, r.subjects.JobsStream())
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("delete job message %d: %w", seq, err)
	}
	return nil
}
