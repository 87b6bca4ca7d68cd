package protocol

import (
	"errors"
	"fmt"

	"github.com/runfleet/runfleet/job"
)

// TenantUsage is what a tenant holds of the fleet's storage, as the workers count it
// (docs/protocol.md, "Tenants"): the bytes and number of its settled jobs' requests within the
// retention, and the bytes of its artifacts within the artifacts bucket's TTL. Jobs stored and
// not yet settled are not in it: max_queued bounds those.
type TenantUsage struct {
	KeptBytes     int64 `json:"kept_bytes"`
	JobsKept      int64 `json:"jobs_kept"`
	ArtifactBytes int64 `json:"artifact_bytes"`
}

// UsageRequest is the body of a request on [UsageSubject].
type UsageRequest struct {
	Tenant string `json:"tenant"`
}

// UsageSubject is the subject the workers answer a [UsageRequest] on with the tenant's
// [TenantUsage] as JSON.
func UsageSubject(s job.Subjects) string { return s.Prefix() + ".api.tenants.usage" }

// ErrStorageFull is the error of a job refused because its tenant holds as much of the fleet's
// storage as its policy allows (reason tenant_storage_full); nothing was stored. The client
// module's root package names the same value (runfleet.ErrStorageFull).
var ErrStorageFull = errors.New("tenant storage full")

// StorageFullError says which bound refused a job. It matches [ErrStorageFull].
type StorageFullError struct {
	Tenant string
	Bound  string // the policy's field: max_kept_bytes, max_jobs_kept or max_artifact_bytes
	Used   int64
	Limit  int64
}

func (e *StorageFullError) Error() string {
	return fmt.Sprintf("tenant %s holds %d of its %s %d: %v", e.Tenant, e.Used, e.Bound, e.Limit, ErrStorageFull)
}

// Is makes errors.Is(err, ErrStorageFull) true.
func (e *StorageFullError) Is(target error) bool { return target == ErrStorageFull }

// AdmitsStorage reports, as a *[StorageFullError], whether tenant, holding u, may store one more
// request of requestBytes under p: the one rule of the storage bounds, which the gateway applies
// where jobs enter over HTTP and the client as an advisory check. A job whose artifacts would
// pass max_artifact_bytes is not refused here: the workers store what fits (ArtifactRoom).
func (p TenantPolicy) AdmitsStorage(tenant string, u TenantUsage, requestBytes int64) error {
	switch {
	case p.MaxJobsKept > 0 && u.JobsKept >= p.MaxJobsKept:
		return &StorageFullError{Tenant: tenant, Bound: "max_jobs_kept", Used: u.JobsKept, Limit: p.MaxJobsKept}
	case p.MaxKeptBytes > 0 && u.KeptBytes+requestBytes > p.MaxKeptBytes:
		return &StorageFullError{Tenant: tenant, Bound: "max_kept_bytes", Used: u.KeptBytes, Limit: p.MaxKeptBytes}
	case p.MaxArtifactBytes > 0 && u.ArtifactBytes >= p.MaxArtifactBytes:
		return &StorageFullError{Tenant: tenant, Bound: "max_artifact_bytes", Used: u.ArtifactBytes, Limit: p.MaxArtifactBytes}
	}
	return nil
}

// HasStorageBounds reports whether p bounds the tenant's storage at all: without, no usage need
// be read.
func (p TenantPolicy) HasStorageBounds() bool {
	return p.MaxKeptBytes > 0 || p.MaxJobsKept > 0 || p.MaxArtifactBytes > 0
}

// ArtifactRoom is how many bytes of artifacts a job of a tenant holding u may store under p: -1
// when p does not bound them.
func (p TenantPolicy) ArtifactRoom(u TenantUsage) int64 {
	if p.MaxArtifactBytes <= 0 {
		return -1
	}
	return max(p.MaxArtifactBytes-u.ArtifactBytes, 0)
}
