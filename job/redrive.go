package job

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// Redrivable reports whether a job of status s may be redriven (docs/protocol.md "Redrive"):
// every status but succeeded and rejected. An unknown job's code may have run, so its redrive
// needs a confirmation.
func (s Status) Redrivable() bool {
	switch s {
	case StatusUnknown, StatusError, StatusFailed, StatusTimedOut, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// RedriveID is the id of the job that redrives job id: the same for every call, so that
// repeating a redrive finds the job the first call published instead of running it twice.
func RedriveID(id string) string {
	b := sha256.Sum256([]byte("runfleet redrive\x00" + id))
	b[6] = b[6]&0x0f | 0x80 // a version 8 UUID: derived, not random
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// RedriveRequest asks the fleet to redrive one job.
type RedriveRequest struct {
	JobID string `json:"job_id"`
	// Tenant is the job's tenant; default DefaultTenant. The redrive is the same tenant's job.
	Tenant            string `json:"tenant,omitempty"`
	ConfirmMayHaveRun bool   `json:"confirm_may_have_run,omitempty"`
}

// Redriven is the job a redrive published; Duplicate says an earlier call published it.
type Redriven struct {
	JobID     string `json:"job_id"`
	RedriveOf string `json:"redrive_of"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// BulkRedrive asks the fleet to redrive every job a filter selects, paced. DryRun only counts
// them. Until, when zero, is fixed at the run's start, so that the jobs the run publishes and
// that settle during it are not redriven again.
type BulkRedrive struct {
	Status            Status    `json:"status,omitempty"`
	Queue             string    `json:"queue,omitempty"`
	Tenant            string    `json:"tenant,omitempty"`
	Since             time.Time `json:"since,omitzero"`
	Until             time.Time `json:"until,omitzero"`
	RatePerS          float64   `json:"rate_per_s,omitempty"` // default DefaultRedriveRate
	ConfirmMayHaveRun bool      `json:"confirm_may_have_run,omitempty"`
	DryRun            bool      `json:"dry_run,omitempty"`
}

// DefaultRedriveRate is a bulk redrive's pace when it names none, in jobs a second.
const DefaultRedriveRate = 50

// Query is the list filter of b.
func (b BulkRedrive) Query() ListQuery {
	return ListQuery{Status: b.Status, Queue: b.Queue, Tenant: b.Tenant, Since: b.Since, Until: b.Until}
}

// The states of a bulk redrive run.
const (
	RunRunning = "running"
	RunDone    = "done"
	RunStopped = "stopped"
	RunFailed  = "failed"
)

// RedriveRun is a bulk redrive's progress. Total is what the filter counted at the start;
// Redriven counts jobs published (or found published by an earlier call), Skipped the unknown
// jobs of a run without confirmation and jobs no longer redrivable, Failed the rest.
type RedriveRun struct {
	ID       string      `json:"id"`
	State    string      `json:"state"`
	Filter   BulkRedrive `json:"filter"`
	Total    int64       `json:"total"`
	Redriven int64       `json:"redriven"`
	Skipped  int64       `json:"skipped"`
	Failed   int64       `json:"failed"`
	Error    string      `json:"error,omitempty"`
	Worker   string      `json:"worker,omitempty"` // the worker running it; another takes over one that dies
	Started  time.Time   `json:"started"`
	Updated  time.Time   `json:"updated"`
}

// Subjects of the fleet's redrive service; each request carries JSON and each reply JSON or the
// headers Nats-Service-Error and Nats-Service-Error-Code.
func (s Subjects) Redrive() string      { return s.prefix + ".api.jobs.redrive" }   // RedriveRequest → Redriven
func (s Subjects) RedriveStart() string { return s.prefix + ".api.redrives.start" } // BulkRedrive → RedriveRun
func (s Subjects) RedriveRun() string   { return s.prefix + ".api.redrives.get" }   // {"id"} → RedriveRun
func (s Subjects) RedriveStop() string  { return s.prefix + ".api.redrives.stop" }  // {"id"} → RedriveRun

// Reasons a redrive is refused, as the fleet's redrive service and the gateway name them.
//
// Deprecated: use protocol.ReasonNotFound, ReasonNotSettled, ReasonNotRedrivable and
// ReasonMayHaveRun (github.com/runfleet/runfleet/protocol), the same strings.
const (
	RedriveNotFound      = "not_found"      // the fleet holds no such job or run
	RedriveNotSettled    = "not_settled"    // the job has not settled: nothing to redrive yet
	RedriveNotRedrivable = "not_redrivable" // succeeded or rejected
	RedriveMayHaveRun    = "may_have_run"   // unknown, and the caller did not confirm
)
