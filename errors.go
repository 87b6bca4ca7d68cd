package runfleet

import (
	"strconv"

	"github.com/runfleet/runfleet/job"
)

// JobError is an error about one job: every error of the client's calls that concerns a job id —
// Submit, SubmitMany's items, Run, Output, Lookup, Request, Settlement, Watch, Pages, Cancel,
// Redrive and the artifact calls — is one, so a caller that did not choose the id still learns it
// (errors.As; after a Submit whose ack timed out, the job may be stored). A job that settled other
// than succeeded is a JobError around the settlement's *[job.OutcomeError] or *[job.RejectError].
type JobError struct {
	ID  string
	Err error
}

func (e *JobError) Error() string {
	// A settlement's error names its job already.
	switch err := e.Err.(type) {
	case *job.OutcomeError:
		if err.JobID == e.ID {
			return err.Error()
		}
	case *job.RejectError:
		if err.JobID == e.ID {
			return err.Error()
		}
	}
	id := e.ID
	if !job.ValidID(id) {
		id = strconv.Quote(id) // the caller's text, not an id the fleet issued
	}
	return "job " + id + ": " + e.Err.Error()
}

func (e *JobError) Unwrap() error { return e.Err }
