package job

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Page sizes of a list of settled jobs.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ErrInvalidQuery is wrapped by every error of [ListQuery.Validate].
var ErrInvalidQuery = errors.New("invalid list query")

// ListQuery selects settled jobs, newest first. Empty fields select everything; Since and Until
// bound the settle time (Since inclusive, Until exclusive). Cursor is the one the previous page
// returned.
type ListQuery struct {
	Status Status    `json:"status,omitempty"`
	Queue  string    `json:"queue,omitempty"`
	Tenant string    `json:"tenant,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	Limit  int       `json:"limit,omitempty"` // default DefaultListLimit, at most MaxListLimit
	Cursor string    `json:"cursor,omitempty"`
	// Count asks for the number of jobs the filter selects (without the cursor) beside the page.
	Count bool `json:"count,omitempty"`
}

// Validate checks the query's names and bounds, wrapping [ErrInvalidQuery].
func (q ListQuery) Validate() error {
	switch {
	case q.Status != "" && !slices.Contains(Statuses, q.Status):
		return fmt.Errorf("%w: status %q", ErrInvalidQuery, clip(string(q.Status)))
	case q.Queue != "" && !ValidQueue(q.Queue):
		return fmt.Errorf("%w: queue %q: %w", ErrInvalidQuery, clip(q.Queue), ErrInvalidQueue)
	case q.Tenant != "" && !ValidTenant(q.Tenant):
		return fmt.Errorf("%w: tenant %q: %w", ErrInvalidQuery, clip(q.Tenant), ErrInvalidTenant)
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return fmt.Errorf("%w: limit %d: want 0 to %d", ErrInvalidQuery, q.Limit, MaxListLimit)
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until):
		return fmt.Errorf("%w: since %s is not before until %s", ErrInvalidQuery, q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	return nil
}

// Listed is one settled job as a list shows it: what the index keeps of its settlement, which
// outlives the results stream's copy.
type Listed struct {
	JobID     string    `json:"job_id"`
	Status    Status    `json:"status"`
	Reason    Reason    `json:"reason,omitempty"`
	Queue     string    `json:"queue"`
	Tenant    string    `json:"tenant"`
	ExitCode  *int      `json:"exit_code,omitempty"` // read with [Listed.Exit]
	Attempt   int64     `json:"attempt"`
	Worker    string    `json:"worker,omitempty"`
	CPUMS     *int64    `json:"cpu_ms,omitempty"`
	RedriveOf string    `json:"redrive_of,omitempty"`
	SettledAt time.Time `json:"settled_at"`
}

// Exit is [Settlement.Exit] of the listed job.
func (l Listed) Exit() (code int, ok bool) { return exitOf(l.ExitCode) }

// ListedOf is the list row of settlement st of a job of queue and tenant.
//
// Deprecated: internal to the fleet; will move in the next release.
func ListedOf(queue, tenant string, st Settlement) Listed {
	l := Listed{JobID: st.JobID, Status: st.Status, Reason: st.Reason, Queue: queue, Tenant: tenant,
		ExitCode: st.ExitCode, Attempt: st.Attempt, Worker: st.Worker, RedriveOf: st.RedriveOf,
		SettledAt: st.SettledAt.UTC()}
	if st.Usage != nil {
		l.CPUMS = st.Usage.CPUMS
	}
	return l
}

// JobList is one page of a list. Cursor is empty on the last page; Count is set when the query
// asked for it.
type JobList struct {
	Jobs   []Listed `json:"jobs"`
	Cursor string   `json:"cursor,omitempty"`
	Count  *int64   `json:"count,omitempty"`
}

// ListJobs is the subject of the fleet's job index: a request carries a [ListQuery] and its reply
// a [JobList], or the headers Nats-Service-Error and Nats-Service-Error-Code.
func (s Subjects) ListJobs() string { return s.prefix + ".api.jobs.list" }

// CountJobs is the subject of the job index's counts: a request carries a [CountQuery] and its
// reply a [JobCounts], or the service error headers as for ListJobs.
func (s Subjects) CountJobs() string { return s.prefix + ".api.jobs.count" }

// MaxCountQueries bounds the filters of one [CountQuery].
const MaxCountQueries = 1000

// CountQuery asks how many settled jobs each filter selects, in one round trip: an overview's
// figures per queue and tenant. Limit, Cursor and Count of each filter are ignored.
type CountQuery struct {
	Queries []ListQuery `json:"queries"`
}

// Validate checks every filter, and that there are at most MaxCountQueries.
func (c CountQuery) Validate() error {
	if len(c.Queries) > MaxCountQueries {
		return fmt.Errorf("%w: %d filters: want at most %d", ErrInvalidQuery, len(c.Queries), MaxCountQueries)
	}
	for i, q := range c.Queries {
		q.Limit, q.Cursor = 0, ""
		if err := q.Validate(); err != nil {
			return fmt.Errorf("filter %d: %w", i, err)
		}
	}
	return nil
}

// JobCounts answers a [CountQuery]: Counts[i] is how many jobs Queries[i] selects.
type JobCounts struct {
	Counts []int64 `json:"counts"`
}

// ParseTime reads a bound of a list window: an RFC 3339 time, or a duration meaning that long
// before now ("1h", "30m").
//
// Deprecated: internal to the fleet; will move in the next release.
func ParseTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: %q: a negative duration", ErrInvalidQuery, clip(s))
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %q: want an RFC 3339 time or a duration ago (1h)", ErrInvalidQuery, clip(s))
	}
	return t, nil
}
