package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// TenantPolicy is one tenant's entry in the tenants bucket (docs/protocol.md, "Tenants"), a JSON
// object keyed by the tenant's name. A zero bound means none.
//
// One rule holds wherever an entry is read (workers, gateways, the client's max_queued check,
// `submit tenant`): an entry that [DecodeTenantPolicy] refuses counts as absent, so the tenant
// takes the [DefaultTenantPolicy] entry, and with none of those, no limits. Writers validate
// before they write, so an invalid entry is one written by hand.
type TenantPolicy struct {
	// MaxQueued bounds the tenant's jobs stored and not yet started, where a job enters through
	// the gateway (and, advisory, the Go client).
	MaxQueued int64 `json:"max_queued,omitempty"`
	// MaxRunning bounds the tenant's jobs that hold a sandbox at once, across the fleet.
	MaxRunning int64 `json:"max_running,omitempty"`
	// Weight is the tenant's share of the fleet, in sandbox CPU time, among the tenants with
	// jobs waiting; zero means 1.
	Weight float64 `json:"weight,omitempty"`
	// MaxKeptBytes bounds the bytes of the tenant's requests the fleet keeps (settled within the
	// retention), MaxJobsKept their number (the tenant's rows of the job index), and
	// MaxArtifactBytes the bytes of its artifacts still stored: see [TenantUsage].
	MaxKeptBytes     int64 `json:"max_kept_bytes,omitempty"`
	MaxJobsKept      int64 `json:"max_jobs_kept,omitempty"`
	MaxArtifactBytes int64 `json:"max_artifact_bytes,omitempty"`
	// APIKeysSHA256 are the hex SHA-256 digests of the gateway keys that act for the tenant.
	APIKeysSHA256 []string `json:"api_keys_sha256,omitempty"`
}

// Bounds of a tenant policy: what a typo could make of the fleet stays sane.
const (
	MaxTenantWeight      = 1000
	MaxTenantAPIKeys     = 64
	MaxTenantPolicyBytes = 16 << 10
	// DefaultTenantPolicy is the key of the entry a tenant without its own takes.
	DefaultTenantPolicy = "default"
)

// ErrInvalidTenantPolicy is the error of a policy that [DecodeTenantPolicy] or
// [TenantPolicy.Validate] refuses.
var ErrInvalidTenantPolicy = errors.New("invalid tenant policy")

// EffectiveWeight is p's weight, 1 when unset.
func (p TenantPolicy) EffectiveWeight() float64 {
	if p.Weight <= 0 {
		return 1
	}
	return p.Weight
}

// AdmitsQueued reports whether a tenant with queued jobs stored and not yet started may store
// one more under p: the one max_queued rule, which the gateway applies where jobs enter over
// HTTP and the client as an advisory check.
func (p TenantPolicy) AdmitsQueued(queued int64) bool {
	return p.MaxQueued <= 0 || queued < p.MaxQueued
}

// Validate reports what is wrong with p, if anything.
func (p TenantPolicy) Validate() error {
	switch {
	case p.MaxQueued < 0:
		return fmt.Errorf("%w: max_queued %d is negative", ErrInvalidTenantPolicy, p.MaxQueued)
	case p.MaxRunning < 0:
		return fmt.Errorf("%w: max_running %d is negative", ErrInvalidTenantPolicy, p.MaxRunning)
	case p.MaxKeptBytes < 0:
		return fmt.Errorf("%w: max_kept_bytes %d is negative", ErrInvalidTenantPolicy, p.MaxKeptBytes)
	case p.MaxJobsKept < 0:
		return fmt.Errorf("%w: max_jobs_kept %d is negative", ErrInvalidTenantPolicy, p.MaxJobsKept)
	case p.MaxArtifactBytes < 0:
		return fmt.Errorf("%w: max_artifact_bytes %d is negative", ErrInvalidTenantPolicy, p.MaxArtifactBytes)
	case math.IsNaN(p.Weight) || p.Weight < 0 || p.Weight > MaxTenantWeight:
		return fmt.Errorf("%w: weight %v is outside [0, %d]", ErrInvalidTenantPolicy, p.Weight, MaxTenantWeight)
	case len(p.APIKeysSHA256) > MaxTenantAPIKeys:
		return fmt.Errorf("%w: %d api keys, at most %d", ErrInvalidTenantPolicy, len(p.APIKeysSHA256), MaxTenantAPIKeys)
	}
	for _, k := range p.APIKeysSHA256 {
		if b, err := hex.DecodeString(k); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("%w: api key digest %q is not 64 hex digits", ErrInvalidTenantPolicy, k)
		}
	}
	return nil
}

// DecodeTenantPolicy reads and validates one bucket entry, the only decoder of one. Unknown
// fields are refused, so that a misspelt bound is an error and not silently no bound.
func DecodeTenantPolicy(b []byte) (TenantPolicy, error) {
	if len(b) > MaxTenantPolicyBytes {
		return TenantPolicy{}, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidTenantPolicy, len(b), MaxTenantPolicyBytes)
	}
	var p TenantPolicy
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return TenantPolicy{}, fmt.Errorf("%w: %w", ErrInvalidTenantPolicy, err)
	}
	if d.More() {
		return TenantPolicy{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidTenantPolicy)
	}
	if err := p.Validate(); err != nil {
		return TenantPolicy{}, err
	}
	return p, nil
}

// TenantsBucketConfig is the configuration of the tenants bucket of s.
func TenantsBucketConfig(s job.Subjects, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       s.TenantsBucket(),
		Description:  "runfleet tenant policies (docs/protocol.md, Tenants), one JSON value per tenant",
		History:      5,
		MaxValueSize: MaxTenantPolicyBytes,
		Storage:      jetstream.FileStorage,
		Replicas:     max(replicas, 1),
	}
}

// Reserved keys of the tenants bucket. A tenant's name starts with a letter or digit, so a key
// that starts with "_" is never a tenant's: readers of policies skip them ([IsReservedTenantKey]).
const (
	// SessionSecretKey holds the gateways' web view secret: 32 random bytes that sign sessions
	// and form tokens, made by the first gateway (a create, so that every gateway agrees) and
	// replaced to end every session (`submit tenant rotate-session-secret`).
	SessionSecretKey = "_session_secret"
	// sessionsNotBeforePrefix + identity holds, as RFC 3339 with nanoseconds, when a web view
	// logout last ended the sessions of that identity (a tenant's name, or [OperatorSessions]).
	sessionsNotBeforePrefix = "_sessions_not_before."
	// OperatorSessions is the identity of the sessions of the gateway's operator key.
	OperatorSessions = "_operator"
)

// IsReservedTenantKey reports whether key of the tenants bucket is not a tenant's policy.
func IsReservedTenantKey(key string) bool { return len(key) > 0 && key[0] == '_' }

// SessionsNotBeforeKey is the key that records when identity's web sessions were last ended.
func SessionsNotBeforeKey(identity string) string { return sessionsNotBeforePrefix + identity }

// SessionsIdentity is the identity a key of [SessionsNotBeforeKey] names, and whether it is one.
func SessionsIdentity(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, sessionsNotBeforePrefix)
	return id, ok && id != ""
}
