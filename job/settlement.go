package job

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Status is how a job ended.
type Status string

// The statuses of docs/protocol.md.
const (
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusTimedOut  Status = "timed_out"
	StatusCancelled Status = "cancelled"
	StatusExpired   Status = "expired"
	StatusRejected  Status = "rejected"
	StatusError     Status = "error"
	StatusUnknown   Status = "unknown"
)

// Statuses lists every status, for metrics and tests.
var Statuses = []Status{StatusSucceeded, StatusFailed, StatusTimedOut, StatusCancelled,
	StatusExpired, StatusRejected, StatusError, StatusUnknown}

// Reason refines a status: why a job failed, was rejected or ended in error.
type Reason string

// Reasons for [StatusFailed].
const (
	ReasonExitNonzero    Reason = "exit_nonzero"
	ReasonSignal         Reason = "signal"
	ReasonOOM            Reason = "oom"
	ReasonOutputLimit    Reason = "output_limit"
	ReasonPageLimit      Reason = "page_limit"
	ReasonWorkerShutdown Reason = "worker_shutdown"
	// ReasonCompileError: the profile's compile step failed (or ran out of its time); the
	// compiler's output is the job's stderr.
	ReasonCompileError Reason = "compile_error"
)

// Reasons for [StatusRejected].
const (
	ReasonInvalidJSON     Reason = "invalid_json"
	ReasonInvalidID       Reason = "invalid_id"
	ReasonIDMismatch      Reason = "id_mismatch"
	ReasonMissingLanguage Reason = "missing_language"
	ReasonUnknownLanguage Reason = "unknown_language"
	ReasonMissingCode     Reason = "missing_code"
	ReasonInvalidCode     Reason = "invalid_code"
	ReasonInvalidPreload  Reason = "invalid_preload"
	ReasonInvalidArgs     Reason = "invalid_args"
	ReasonInvalidStdin    Reason = "invalid_stdin"
	ReasonPayloadTooLarge Reason = "payload_too_large"
	ReasonInvalidLimits   Reason = "invalid_limits"
	ReasonInvalidPath     Reason = "invalid_path"
	ReasonInvalidFiles    Reason = "invalid_files"
	ReasonInvalidEnv      Reason = "invalid_env"
	ReasonInvalidDeadline Reason = "invalid_deadline"
	ReasonInvalidLabels   Reason = "invalid_labels"
	ReasonInvalidOutputs  Reason = "invalid_outputs"
	ReasonDuplicateKey    Reason = "duplicate_key"
	ReasonTooDeep         Reason = "too_deep"
	ReasonReservedHeader  Reason = "reserved_header"
	ReasonUnknownQueue    Reason = "unknown_queue" // a queue the fleet does not declare for the tenant
	// Reasons of records on the rejected subject (job.Rejection), for a job message no
	// settlement subject can name: its subject does not parse, or its id was first claimed from
	// another queue or tenant.
	ReasonInvalidSubject Reason = "invalid_subject"
	ReasonDuplicateID    Reason = "duplicate_id"
)

// Reasons for [StatusError], [StatusUnknown] and [StatusCancelled].
const (
	ReasonInfrastructure Reason = "infrastructure"
	ReasonOutcomeLost    Reason = "outcome_lost"
	ReasonRecordLost     Reason = "record_lost"
	ReasonCancelRequest  Reason = "cancel_request"
)

// ReasonTenantStorageFull is the Settlement.ArtifactsTruncatedReason of artifacts cut at the
// tenant's max_artifact_bytes.
const ReasonTenantStorageFull Reason = "tenant_storage_full"

// Usage is what the sandbox measured; a field a provider cannot measure is absent.
type Usage struct {
	WallMS      int64  `json:"wall_ms"`
	CPUMS       *int64 `json:"cpu_ms,omitempty"`
	MaxRSSBytes *int64 `json:"max_rss_bytes,omitempty"`
}

// Settlement is the last record of a job, stored exactly once on its settled subject.
type Settlement struct {
	JobID  string `json:"job_id"`
	Status Status `json:"status"`
	Reason Reason `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// ExitCode is the wire's exit_code, absent (nil) when the program did not exit on its own: a
	// Go caller reads it with [Settlement.Exit].
	ExitCode         *int   `json:"exit_code"`
	Signal           string `json:"signal"`
	StdoutBytes      int64  `json:"stdout_bytes"`
	StderrBytes      int64  `json:"stderr_bytes"`
	Pages            int64  `json:"pages"`
	Truncated        bool   `json:"truncated"`
	Attempt          int64  `json:"attempt"`
	Worker           string `json:"worker"`
	Provider         string `json:"provider,omitempty"`
	Profile          string `json:"profile,omitempty"`
	ProfileDigest    string `json:"profile_digest,omitempty"`
	SandboxDestroyed bool   `json:"sandbox_destroyed"`
	// Artifacts is what the job's outputs matched and the bucket holds: nil when the request named
	// no outputs, empty (and stored as []) when nothing matched.
	Artifacts          []Artifact        `json:"artifacts,omitzero"`
	ArtifactsTruncated bool              `json:"artifacts_truncated,omitempty"`
	Usage              *Usage            `json:"usage,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	RedriveOf          string            `json:"redrive_of,omitempty"`
	QueuedAt           time.Time         `json:"queued_at,omitzero"`
	StartedAt          time.Time         `json:"started_at,omitzero"`
	FinishedAt         time.Time         `json:"finished_at,omitzero"`
	SettledAt          time.Time         `json:"settled_at"`

	// ArtifactsTruncatedReason says why artifacts were left out when the cause is not the job's
	// own bounds: tenant_storage_full when its tenant's max_artifact_bytes left no room.
	ArtifactsTruncatedReason Reason `json:"artifacts_truncated_reason,omitempty"`
}

// Exit returns the program's exit code, and whether it exited with one: ok is false when it did
// not run, was killed by a signal or timed out (exit_code absent on the wire).
func (s Settlement) Exit() (code int, ok bool) { return exitOf(s.ExitCode) }

func exitOf(p *int) (int, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// Err returns nil when the job succeeded. Otherwise it returns a *[RejectError] for a rejected job
// (as a publisher's own validation does) and a *[OutcomeError] for every other status; both name
// the job.
func (s Settlement) Err() error {
	switch s.Status {
	case StatusSucceeded:
		return nil
	case StatusRejected:
		return &RejectError{JobID: s.JobID, Reason: s.Reason, Detail: s.Detail}
	}
	return &OutcomeError{JobID: s.JobID, Status: s.Status, Reason: s.Reason, Detail: s.Detail, ExitCode: s.ExitCode}
}

// OutcomeError is a job that settled neither succeeded nor rejected.
type OutcomeError struct {
	JobID  string
	Status Status
	Reason Reason
	Detail string
	// ExitCode is the settlement's; read it with [OutcomeError.Exit].
	ExitCode *int
}

// Exit is [Settlement.Exit] of the settlement e came from.
func (e *OutcomeError) Exit() (code int, ok bool) { return exitOf(e.ExitCode) }

func (e *OutcomeError) Error() string {
	msg := "job " + e.JobID + " " + string(e.Status)
	if e.Reason != "" {
		msg += ": " + string(e.Reason)
	}
	if e.ExitCode != nil && e.Reason == ReasonExitNonzero {
		msg += " " + strconv.Itoa(*e.ExitCode)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Ran reports whether the status says the code certainly ran.
func (s Status) Ran() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusTimedOut
}

// Rejection is the record published on the rejected subject for a job message that no settlement
// subject can name: its subject does not parse, or its id belongs to a job of another subject.
type Rejection struct {
	StreamSeq uint64 `json:"stream_seq"`
	Subject   string `json:"subject"`
	Reason    Reason `json:"reason"`
	Detail    string `json:"detail,omitempty"`
}

// MaxDetailBytes bounds a settlement's or rejection's detail, so that no settlement can be too
// large to store: every other field of one is bounded already.
const MaxDetailBytes = 1024

// ClipDetail cuts s to at most MaxDetailBytes, on a UTF-8 boundary.
//
// Deprecated: internal to the fleet; will move in the next release.
func ClipDetail(s string) string {
	if len(s) <= MaxDetailBytes {
		return s
	}
	cut := MaxDetailBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
