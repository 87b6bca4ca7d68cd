package keyspace

import (
	"cmp"
	"hash/fnv"
	"strconv"

	"github.com/runfleet/runfleet/job"
)

// Keys names every key of one fleet, under its prefix.
type Keys struct {
	prefix string
}

// New returns the keys under prefix; "" is job.DefaultPrefix.
func New(prefix string) Keys { return Keys{prefix: cmp.Or(prefix, job.DefaultPrefix)} }

// Buckets is how many hash-tagged groups the jobs' keys are spread over; see the package
// documentation. Changing it moves every job's keys, so it is part of the key layout.
const Buckets = 1024

// Bucket is tenant's job id's bucket: FNV-1a of "<tenant>.<id>" modulo Buckets, the same in
// every worker.
func Bucket(tenant, id string) int {
	h := fnv.New32a()
	h.Write([]byte(jobName(tenant, id)))
	return int(h.Sum32() % Buckets)
}

// jobName is a job's segment of its keys, "<tenant>.<id>": neither name holds a '.' or a ':'
// (job.ValidTenant, job.ValidID), so two jobs never share one.
func jobName(tenant, id string) string { return tenant + "." + id }

// bucket is the hash-tagged stem of a bucket's keys: every key of one bucket hashes to one slot.
func (k Keys) bucket(b int) string { return k.prefix + ":{b" + strconv.Itoa(b) + "}" }

// Record is tenant's job id's record (a hash).
func (k Keys) Record(tenant, id string) string {
	return k.bucket(Bucket(tenant, id)) + ":job:" + jobName(tenant, id)
}

// Lease is tenant's job id's lease (a string, "<gen>:<owner>").
func (k Keys) Lease(tenant, id string) string {
	return k.bucket(Bucket(tenant, id)) + ":lease:" + jobName(tenant, id)
}

// Epoch is bucket b's epoch (a string, milliseconds since the Unix epoch) of the records of
// protocol version 3: a job stored before it may have been claimed under a version-2 record,
// which named the id alone.
func (k Keys) Epoch(b int) string { return k.bucket(b) + ":epoch3" }

// Running is tenant's set of running slots (a sorted set of tokens by expiry), a slot of its own.
func (k Keys) Running(tenant string) string { return k.prefix + ":{t:" + tenant + "}:running" }

// Usage is tenant's storage counts (a hash of per-hour counters, jobindex's), in the tenant's slot.
func (k Keys) Usage(tenant string) string { return k.prefix + ":{t:" + tenant + "}:usage" }

// index is the hash-tagged stem of the index's keys and the redrive runs': one slot for all.
func (k Keys) index() string { return "{" + k.prefix + ":index}" }

// Index is the sorted set of the settled jobs one filter selects; an empty field is every value.
func (k Keys) Index(status job.Status, queue, tenant string) string {
	return k.index() + ":" + cmp.Or(string(status), "*") + ":" + cmp.Or(queue, "*") + ":" + cmp.Or(tenant, "*")
}

// RedriveRun is bulk redrive run id's progress (a string, the JSON of job.RedriveRun).
func (k Keys) RedriveRun(id string) string { return k.index() + ":redrive:" + id }

// RedriveStop is set when run id was asked to stop.
func (k Keys) RedriveStop(id string) string { return k.RedriveRun(id) + ":stop" }

// RedrivePos is where run id is in its listing (a string, JSON).
func (k Keys) RedrivePos(id string) string { return k.RedriveRun(id) + ":pos" }

// RedriveHold names the worker that holds run id (a string, expiring unless renewed).
func (k Keys) RedriveHold(id string) string { return k.RedriveRun(id) + ":hold" }

// RedrivesRunning is the set of the ids of the runs not yet ended.
func (k Keys) RedrivesRunning() string { return k.index() + ":redrives:running" }
