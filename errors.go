package runfleet

// JobError is an error about one job: every error of [Client.Submit], [Client.Lookup],
// [Client.Request], [Client.Settlement], [Client.Cancel], [Client.Watch] and [Client.Run] that
// concerns a known id is one, so a caller that did not choose the id still learns it (errors.As;
// after a Submit whose ack timed out, the job may be stored).
type JobError struct {
	ID  string
	Err error
}

func (e *JobError) Error() string { return "job " + e.ID + ": " + e.Err.Error() }

func (e *JobError) Unwrap() error { return e.Err }
