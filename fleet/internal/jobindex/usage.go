package jobindex

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// DefaultArtifactTTL is how long an artifact is counted when Options.ArtifactTTL is zero: the
// artifacts bucket's default TTL, the pages'.
const DefaultArtifactTTL = 24 * time.Hour

// usageBucket is the width of one counter of a tenant's usage: a counter is dropped once the
// newest thing it counts has expired, so a count errs high by at most this much time.
const usageBucket = time.Hour

// Fields of a tenant's usage hash (keyspace.Keys.Usage), each with the hour it counts:
// "<kind>:<unix hour>".
const (
	fieldKeptBytes     = "kb"
	fieldJobsKept      = "kn"
	fieldArtifactBytes = "ab"
)

// Kept counts a settled job of tenant, whose request is bytes long, settled at: its request is
// kept, and its row listed, for the retention. The caller counts each settlement once (the one
// that stored it), so that a row an adopting attempt lists again is not counted twice.
func (x *Index) Kept(ctx context.Context, tenant string, at time.Time, bytes int64) error {
	k := x.keys.Usage(tenant)
	h := strconv.FormatInt(at.Unix()/int64(usageBucket/time.Second), 10)
	_, err := x.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k, fieldKeptBytes+":"+h, bytes)
		p.HIncrBy(ctx, k, fieldJobsKept+":"+h, 1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("count kept job of %s: %w", tenant, err)
	}
	return nil
}

// ArtifactsStored counts bytes of artifacts tenant's job stored at: they are kept for the
// artifacts bucket's TTL.
func (x *Index) ArtifactsStored(ctx context.Context, tenant string, at time.Time, bytes int64) error {
	if bytes <= 0 {
		return nil
	}
	h := strconv.FormatInt(at.Unix()/int64(usageBucket/time.Second), 10)
	if err := x.rdb.HIncrBy(ctx, x.keys.Usage(tenant), fieldArtifactBytes+":"+h, bytes).Err(); err != nil {
		return fmt.Errorf("count artifacts of %s: %w", tenant, err)
	}
	return nil
}

// Usage returns what tenant holds now: one read of its counters, at most one per hour of the
// retention and of the artifacts' TTL, whatever the number of its jobs. Counters past their time
// are removed as they are read.
func (x *Index) Usage(ctx context.Context, tenant string) (protocol.TenantUsage, error) {
	k := x.keys.Usage(tenant)
	fields, err := x.rdb.HGetAll(ctx, k).Result()
	if err != nil {
		return protocol.TenantUsage{}, fmt.Errorf("read usage of %s: %w", tenant, err)
	}
	now := time.Now()
	var u protocol.TenantUsage
	var old []string
	for f, v := range fields {
		kind, hour, ok := strings.Cut(f, ":")
		h, err := strconv.ParseInt(hour, 10, 64)
		n, nerr := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || nerr != nil {
			old = append(old, f)
			continue
		}
		ttl := x.retention
		if kind == fieldArtifactBytes {
			ttl = x.artifactTTL
		}
		if time.Unix((h+1)*int64(usageBucket/time.Second), 0).Add(ttl).Before(now) {
			old = append(old, f)
			continue
		}
		switch kind {
		case fieldKeptBytes:
			u.KeptBytes += n
		case fieldJobsKept:
			u.JobsKept += n
		case fieldArtifactBytes:
			u.ArtifactBytes += n
		}
	}
	if len(old) > 0 {
		if err := x.rdb.HDel(ctx, k, old...).Err(); err != nil {
			return protocol.TenantUsage{}, fmt.Errorf("trim usage of %s: %w", tenant, err)
		}
	}
	return u, nil
}

// usage answers a protocol.UsageRequest.
func (x *Index) usage(ctx context.Context, r protocol.UsageRequest) (protocol.TenantUsage, error) {
	if !job.ValidTenant(r.Tenant) {
		return protocol.TenantUsage{}, fmt.Errorf("%w: tenant %q", job.ErrInvalidQuery, r.Tenant)
	}
	return x.Usage(ctx, r.Tenant)
}
