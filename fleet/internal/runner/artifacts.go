package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/artifact"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// bucket is the fleet's artifacts bucket, opened once.
type bucket struct {
	mu        sync.Mutex
	store     jetstream.ObjectStore
	nextPurge time.Time // of orphan chunks
}

// orphanEvery is how often a runner looks for chunks that no object names.
const orphanEvery = 5 * time.Minute

func (r *Runner) artifacts(ctx context.Context) (jetstream.ObjectStore, error) {
	r.bucket.mu.Lock()
	defer r.bucket.mu.Unlock()
	if r.bucket.store != nil {
		return r.bucket.store, nil
	}
	s, err := r.js.ObjectStore(ctx, r.subjects.ArtifactsBucket())
	if err != nil {
		return nil, err
	}
	r.bucket.store = s
	return s, nil
}

// collect stores the files a finished program left that the job's outputs match, before its
// sandbox is destroyed. It returns nil when the job named no outputs.
func (r *Runner) collect(ctx context.Context, a *attempt, b job.Bounds, sb sandbox.Sandbox) *artifact.Result {
	if len(a.outputs) == 0 {
		return nil
	}
	res := &artifact.Result{Artifacts: []job.Artifact{}, Truncated: true}
	fr, ok := sb.(sandbox.FileReader)
	if !ok {
		a.log.Error("collect artifacts: the provider cannot read a sandbox's files")
		return res
	}
	store, err := r.artifacts(ctx)
	if err != nil {
		a.log.Error("collect artifacts", "err", err)
		return res
	}
	// Collection takes at most half the settle budget: destroying the sandbox, the sweep and the
	// settlement need the rest, whatever the job left in its workspace.
	cctx, cancel := context.WithTimeout(ctx, r.o.SettleWait/2)
	defer cancel()
	maxBytes := r.artifactRoom(cctx, a, b.ArtifactBytes)
	*res, err = artifact.Collect(cctx, fr, store, artifact.Job{Tenant: a.tenant, ID: a.id, Attempt: a.base.Attempt, Outputs: a.outputs,
		MaxBytes: maxBytes, MaxFiles: b.ArtifactFiles, Valid: a.lease.Valid})
	if err != nil && !errors.Is(err, artifact.ErrLeaseLost) {
		a.log.Error("collect artifacts", "err", err, "stored", len(res.Artifacts))
	}
	if r.o.Usage != nil {
		var stored int64
		for _, art := range res.Artifacts {
			stored += art.Size
		}
		if err := r.o.Usage.ArtifactsStored(ctx, a.tenant, time.Now(), stored); err != nil {
			a.log.Warn("count the tenant's artifacts", "err", err)
		}
	}
	return res
}

// artifactRoom is the bytes of artifacts the job may store: its own bound, or less when its
// tenant's max_artifact_bytes leaves less room, which the attempt then records. A usage that
// cannot be read leaves the job's own bound: the tenant bound is advisory, the bucket's is not.
func (r *Runner) artifactRoom(ctx context.Context, a *attempt, own int64) int64 {
	if r.o.Usage == nil || r.o.Tenants == nil {
		return own
	}
	p := r.o.Tenants.Of(a.tenant)
	if p.MaxArtifactBytes <= 0 {
		return own
	}
	u, err := r.o.Usage.Usage(ctx, a.tenant)
	if err != nil {
		a.log.Warn("read the tenant's usage: artifacts bounded by the job's own bound only", "err", err)
		return own
	}
	if room := p.ArtifactRoom(u); room < own {
		a.artifactsCut = job.ReasonTenantStorageFull
		return room
	}
	return own
}

// sweep removes the objects of the job that st does not list, from every attempt up to this
// one, before st is stored (G4). It fails only when the bucket cannot be reached; then the job
// is not settled.
func (r *Runner) sweep(ctx context.Context, a *attempt, st job.Settlement) error {
	store, err := r.artifacts(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil // no attempt stored anything
	}
	if err != nil {
		return err
	}
	return artifact.Sweep(ctx, store, a.tenant, a.id, a.base.Attempt, st.Artifacts)
}

// forget removes the job's manifests once its settlement is stored; failing leaves them to the
// bucket's TTL. Every orphanEvery it also purges the chunks of puts cut off before they stored
// their metadata, which no manifest can name.
func (r *Runner) forget(ctx context.Context, a *attempt) {
	store, err := r.artifacts(ctx)
	if err == nil {
		err = artifact.Forget(ctx, store, a.tenant, a.id, a.base.Attempt)
	}
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		a.log.Warn("remove artifact manifests", "err", err)
	}
	now := time.Now()
	r.bucket.mu.Lock()
	due := !now.Before(r.bucket.nextPurge)
	if due {
		r.bucket.nextPurge = now.Add(orphanEvery)
	}
	r.bucket.mu.Unlock()
	if !due {
		return
	}
	// Chunks are stamped by the server's clock: OrphanAge leaves room for skew between hosts.
	n, err := artifact.PurgeOrphans(ctx, r.js, r.subjects.ArtifactsBucket(), now.Add(-artifact.OrphanAge))
	if err != nil {
		a.log.Warn("purge orphan artifact chunks", "err", err, "purged", n)
	} else if n > 0 {
		a.log.Info("purged orphan artifact chunks", "puts", n)
	}
}
