package job

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the subject, stream and key prefix when none is configured.
const DefaultPrefix = "runfleet"

// DefaultQueue is the queue a job goes to when none is named.
const DefaultQueue = "default"

// DefaultTenant is the tenant of a job whose publisher names none.
const DefaultTenant = "default"

var (
	prefixPattern = namePattern{re: `^[a-z0-9][a-z0-9_-]{0,31}$`, first: classOf("a-z0-9"), rest: classOf("a-z0-9_-"), max: 32}
	queuePattern  = namePattern{re: `^[a-z0-9][a-z0-9_-]{0,63}$`, first: classOf("a-z0-9"), rest: classOf("a-z0-9_-"), max: 64}
	tenantPattern = namePattern{re: `^[a-z0-9][a-z0-9_-]{0,63}$`, first: classOf("a-z0-9"), rest: classOf("a-z0-9_-"), max: 64}
	idPattern     = namePattern{re: `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`, first: classOf("A-Za-z0-9"), rest: classOf("A-Za-z0-9_-"), max: 128}
)

// Errors of names that do not match docs/protocol.md's patterns; callers wrap them with the name.
var (
	ErrInvalidID         = errors.New("not a valid job id (" + idPattern.String() + ")")
	ErrInvalidQueue      = errors.New("not a valid queue name (" + queuePattern.String() + ")")
	ErrInvalidTenant     = errors.New("not a valid tenant name (" + tenantPattern.String() + ")")
	ErrInvalidJobSubject = errors.New("not a job subject (<prefix>.jobs.<queue>.<tenant>.<job>)")
	ErrInvalidPrefix     = errors.New("not a valid prefix (" + prefixPattern.String() + ")")
)

// ValidID reports whether id may name a job: one NATS subject token and one Redis key segment.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ValidQueue reports whether q may name a queue.
func ValidQueue(q string) bool { return queuePattern.MatchString(q) }

// ValidTenant reports whether t may name a tenant.
func ValidTenant(t string) bool { return tenantPattern.MatchString(t) }

// NewID returns a new random job id (a version 4 UUID, as text).
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

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

// Job is the subject of job id of tenant on queue: the stream keeps one message per such
// subject, so a lookup by id is a subject-index read.
func (s Subjects) Job(queue, tenant, id string) string {
	return s.prefix + ".jobs." + queue + "." + tenant + "." + id
}

// TenantJob matches the subject of tenant's job id whatever its queue: the stream holds at most
// one (a second queue's copy is refused as a duplicate).
func (s Subjects) TenantJob(tenant, id string) string {
	return s.prefix + ".jobs.*." + tenant + "." + id
}

// JobByID matches job id's subjects of every tenant: an operator's lookup, which may find
// several tenants' jobs of one id.
func (s Subjects) JobByID(id string) string { return s.prefix + ".jobs.*.*." + id }

// QueueJobs matches the jobs of every tenant on queue.
func (s Subjects) QueueJobs(queue string) string { return s.prefix + ".jobs." + queue + ".>" }

// TenantJobs matches the jobs of tenant on queue.
func (s Subjects) TenantJobs(queue, tenant string) string {
	return s.prefix + ".jobs." + queue + "." + tenant + ".*"
}

// AllJobs matches every job subject.
func (s Subjects) AllJobs() string { return s.prefix + ".jobs.>" }

// ParseJob splits a job subject into its queue, tenant and job id, each checked against its
// pattern.
func (s Subjects) ParseJob(subject string) (queue, tenant, id string, err error) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".jobs.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return "", "", "", fmt.Errorf("subject %q: %w", subject, ErrInvalidJobSubject)
	}
	queue, tenant, id = parts[0], parts[1], parts[2]
	switch {
	case !ValidQueue(queue):
		return "", "", "", fmt.Errorf("subject %q: queue %q: %w", subject, queue, ErrInvalidQueue)
	case !ValidTenant(tenant):
		return "", "", "", fmt.Errorf("subject %q: tenant %q: %w", subject, tenant, ErrInvalidTenant)
	case !ValidID(id):
		return "", "", "", fmt.Errorf("subject %q: job %q: %w", subject, id, ErrInvalidID)
	}
	return queue, tenant, id, nil
}

// Every subject of one job's results, dispatch and cancel names its tenant and then its id
// (protocol version 3): a job is its tenant and its id, and two tenants' jobs of one id never
// share a subject.

// Page is the subject of tenant's job id's output pages.
func (s Subjects) Page(tenant, id string) string {
	return s.prefix + ".results." + tenant + "." + id + ".page"
}

// Settled is the subject of tenant's job id's settlement.
func (s Subjects) Settled(tenant, id string) string {
	return s.prefix + ".results." + tenant + "." + id + ".settled"
}

// AllSettled matches the settlements of every job.
func (s Subjects) AllSettled() string { return s.prefix + ".results.*.*.settled" }

// Results matches everything tenant's job id produces, pages and settlement.
func (s Subjects) Results(tenant, id string) string {
	return s.prefix + ".results." + tenant + "." + id + ".>"
}

// TenantResults matches the pages and settlements of every job of tenant.
func (s Subjects) TenantResults(tenant string) string { return s.prefix + ".results." + tenant + ".>" }

// ParseResult splits a results or watch subject of protocol version 3 into its tenant, job id
// and kind ("page" or "settled"); ok is false for any other shape, a version-2 one among them.
func (s Subjects) ParseResult(subject string) (tenant, id, kind string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.prefix+".results.")
	if !found {
		if rest, found = strings.CutPrefix(subject, s.prefix+".watch."); !found {
			return "", "", "", false
		}
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !ValidTenant(parts[0]) || !ValidID(parts[1]) || (parts[2] != "page" && parts[2] != "settled") {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// Dispatched is the subject of tenant's job id's dispatch marker: the first attempt to store one
// is the only attempt whose code may reach a sandbox (docs/protocol.md, "The dispatch gate"). It
// lies outside [Subjects.Results], so that watches never see it.
func (s Subjects) Dispatched(tenant, id string) string {
	return s.prefix + ".dispatched." + tenant + "." + id
}

// DispatchedV2 is the dispatch marker a version-2 worker stored for job id, read only for a job
// in doubt that was stored before it (docs/protocol.md, "From version 2").
func (s Subjects) DispatchedV2(id string) string { return s.prefix + ".dispatched." + id }

// AllDispatched matches the dispatch markers of every job.
func (s Subjects) AllDispatched() string { return s.prefix + ".dispatched.*.*" }

// AllDispatchedV2 matches the dispatch markers of protocol version 2, which results streams made
// before version 3 keep.
func (s Subjects) AllDispatchedV2() string { return s.prefix + ".dispatched.*" }

// AllResults matches the pages and settlements of every job (and those of version 2, which
// results streams made before version 3 keep).
func (s Subjects) AllResults() string { return s.prefix + ".results.>" }

// Watch matches what the results stream stored for tenant's job id, as it republishes it:
// watchers follow it instead of the results subjects, which also carry publishes the stream
// refused.
func (s Subjects) Watch(tenant, id string) string {
	return s.prefix + ".watch." + tenant + "." + id + ".>"
}

// WatchPage and WatchSettled are the republished subjects of tenant's job id's pages and
// settlement.
func (s Subjects) WatchPage(tenant, id string) string {
	return s.prefix + ".watch." + tenant + "." + id + ".page"
}
func (s Subjects) WatchSettled(tenant, id string) string {
	return s.prefix + ".watch." + tenant + "." + id + ".settled"
}

// TenantWatch matches the republished pages and settlements of every job of tenant.
func (s Subjects) TenantWatch(tenant string) string { return s.prefix + ".watch." + tenant + ".>" }

// AllWatch matches the republished pages and settlements of every job.
func (s Subjects) AllWatch() string { return s.prefix + ".watch.>" }

// Rejected is the subject of records about job messages whose id could not be read.
func (s Subjects) Rejected() string { return s.prefix + ".rejected" }

// Cancel is the subject a cancel request for tenant's job id is published to.
func (s Subjects) Cancel(tenant, id string) string {
	return s.prefix + ".cancel." + tenant + "." + id
}

// AllCancels matches the cancel requests of every job.
func (s Subjects) AllCancels() string { return s.prefix + ".cancel.*.*" }

// ParseCancel splits a cancel subject into its tenant and job id; ok is false for any other
// shape, a version-2 one among them.
func (s Subjects) ParseCancel(subject string) (tenant, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.prefix+".cancel.")
	tenant, id, two := strings.Cut(rest, ".")
	if !found || !two || !ValidTenant(tenant) || !ValidID(id) {
		return "", "", false
	}
	return tenant, id, true
}

// Workers is the subject worker heartbeats are published to, one token per worker id.
func (s Subjects) Workers() string { return s.prefix + ".workers" }

// WorkersPing is the subject every worker answers a request on with its heartbeat, at once.
func (s Subjects) WorkersPing() string { return s.prefix + ".workers.ping" }

// JobsStream is the name of the stream that holds job requests.
func (s Subjects) JobsStream() string { return s.stream + "_JOBS" }

// ResultsStream is the name of the stream that holds pages, settlements and rejection records.
func (s Subjects) ResultsStream() string { return s.stream + "_RESULTS" }

// ControlStream is the name of the stream that holds cancel requests.
func (s Subjects) ControlStream() string { return s.stream + "_CONTROL" }

// Consumer is the name of the durable pull consumer that the fleet once shared for queue.
//
// It is the layout of the first version-2 fleets, which kept one consumer per queue; the fleet
// reads only whether it was made (the discovery consumer of internal/queue).
func (s Subjects) Consumer(queue string) string { return s.stream + "_WORKERS_" + queue }

// TenantConsumer is the durable consumer that the fleet shares for tenant's jobs on queue. The
// digest keeps two pairs apart whose names join alike ("a_b"+"c", "a"+"b_c").
func (s Subjects) TenantConsumer(queue, tenant string) string {
	sum := sha256.Sum256([]byte(queue + "\x00" + tenant))
	return s.stream + "_T_" + queue + "_" + tenant + "_" + hex.EncodeToString(sum[:4])
}

// Discovery is the durable consumer of queue's job headers, through which the fleet learns of a
// tenant's first job there.
func (s Subjects) Discovery(queue string) string { return s.stream + "_DISCOVER_" + queue }

// Arrived is the subject on which the jobs stream republishes the headers of each job it stores
// on queue for tenant; "*" matches any.
func (s Subjects) Arrived(queue, tenant string) string {
	return s.prefix + ".arrived." + queue + "." + tenant + ".*"
}

// TenantsBucket is the name of the key-value bucket that holds each tenant's policy.
func (s Subjects) TenantsBucket() string { return s.stream + "_TENANTS" }

// ConsumersBucket is the name of the key-value bucket that marks which durable consumers the
// fleet made, and when it first made them.
func (s Subjects) ConsumersBucket() string { return s.stream + "_CONSUMERS" }

// ArtifactsBucket is the name of the object store bucket that holds the files jobs produced.
func (s Subjects) ArtifactsBucket() string { return s.stream + "_ARTIFACTS" }
