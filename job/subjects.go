package job

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the subject, stream and key prefix when none is configured.
const DefaultPrefix = "runfleet"

// DefaultQueue is the queue a job goes to when none is named.
const DefaultQueue = "default"

var (
	prefixPattern = namePattern{re: `^[a-z0-9][a-z0-9_-]{0,31}$`, first: classOf("a-z0-9"), rest: classOf("a-z0-9_-"), max: 32}
	queuePattern  = namePattern{re: `^[a-z0-9][a-z0-9_-]{0,63}$`, first: classOf("a-z0-9"), rest: classOf("a-z0-9_-"), max: 64}
	idPattern     = namePattern{re: `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`, first: classOf("A-Za-z0-9"), rest: classOf("A-Za-z0-9_-"), max: 128}
)

// Errors of names that do not match docs/protocol.md's patterns; callers wrap them with the name.
var (
	ErrInvalidID     = errors.New("not a valid job id (" + idPattern.String() + ")")
	ErrInvalidQueue  = errors.New("not a valid queue name (" + queuePattern.String() + ")")
	ErrInvalidPrefix = errors.New("not a valid prefix (" + prefixPattern.String() + ")")
)

// ValidID reports whether id may name a job: one NATS subject token and one Redis key segment.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ValidQueue reports whether q may name a queue.
func ValidQueue(q string) bool { return queuePattern.MatchString(q) }

// Subjects names the subjects, streams and consumers of one fleet, as derived from its prefix.
type Subjects struct {
	prefix string
	stream string
}

// NewSubjects returns the names for prefix; an empty prefix means [DefaultPrefix].
func NewSubjects(prefix string) (Subjects, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixPattern.MatchString(prefix) {
		return Subjects{}, fmt.Errorf("prefix %q: %w", prefix, ErrInvalidPrefix)
	}
	return Subjects{prefix: prefix, stream: strings.ToUpper(strings.ReplaceAll(prefix, "-", "_"))}, nil
}

// Prefix is the prefix the names derive from.
func (s Subjects) Prefix() string { return s.prefix }

// Jobs is the subject that job requests for queue are published to.
func (s Subjects) Jobs(queue string) string { return s.prefix + ".jobs." + queue }

// AllJobs matches the job subjects of every queue.
func (s Subjects) AllJobs() string { return s.prefix + ".jobs.*" }

// Page is the subject of job id's output pages.
func (s Subjects) Page(id string) string { return s.prefix + ".results." + id + ".page" }

// Settled is the subject of job id's settlement.
func (s Subjects) Settled(id string) string { return s.prefix + ".results." + id + ".settled" }

// Results matches everything job id produces, pages and settlement.
func (s Subjects) Results(id string) string { return s.prefix + ".results." + id + ".>" }

// AllResults matches the pages and settlements of every job.
func (s Subjects) AllResults() string { return s.prefix + ".results.>" }

// Rejected is the subject of records about job messages whose id could not be read.
func (s Subjects) Rejected() string { return s.prefix + ".rejected" }

// Cancel is the subject a cancel request for job id is published to.
func (s Subjects) Cancel(id string) string { return s.prefix + ".cancel." + id }

// AllCancels matches the cancel requests of every job.
func (s Subjects) AllCancels() string { return s.prefix + ".cancel.*" }

// Workers is the subject worker heartbeats are published to, one token per worker id.
func (s Subjects) Workers() string { return s.prefix + ".workers" }

// JobsStream is the name of the stream that holds job requests.
func (s Subjects) JobsStream() string { return s.stream + "_JOBS" }

// ResultsStream is the name of the stream that holds pages, settlements and rejection records.
func (s Subjects) ResultsStream() string { return s.stream + "_RESULTS" }

// ControlStream is the name of the stream that holds cancel requests.
func (s Subjects) ControlStream() string { return s.stream + "_CONTROL" }

// Consumer is the name of the durable pull consumer that the fleet shares for queue.
func (s Subjects) Consumer(queue string) string { return s.stream + "_WORKERS_" + queue }

// ArtifactsBucket is the name of the object store bucket that holds the files jobs produced.
func (s Subjects) ArtifactsBucket() string { return s.stream + "_ARTIFACTS" }
