package runfleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// StreamOptions are the settings of the streams a fleet creates when they are missing. Zero fields
// take the defaults of docs/protocol.md.
type StreamOptions struct {
	Duplicates    time.Duration // dedup window of the jobs stream; default 2 min
	ResultsMaxAge time.Duration // how long output pages and artifacts are kept; default 24 h
	ControlMaxAge time.Duration // default 24 h
	Replicas      int           // default 1; an existing stream with fewer is raised to it

	// ArtifactsMaxBytes bounds the artifacts bucket, new or existing: a put past it fails and
	// nothing stored is dropped. JetStream reserves it on the servers, which must have room. Zero
	// leaves the bound to the workers, which set it at start (--artifacts-max-bytes, default
	// DefaultArtifactsMaxBytes).
	ArtifactsMaxBytes int64

	// Retention is how long the fleet keeps a job's record: the results stream keeps its
	// settlement that long (its MaxAge), while its pages carry a per-message TTL of
	// ResultsMaxAge; default 7 days, the worker's --retention.
	Retention time.Duration
}

// DefaultRetention is how long a job's record is kept when StreamOptions.Retention is zero.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultArtifactsMaxBytes is the default of the worker's --artifacts-max-bytes: 10 GiB.
const DefaultArtifactsMaxBytes = 10 << 30

// StreamConfigs returns the configurations of the three streams of s.
func StreamConfigs(s job.Subjects, o StreamOptions) []jetstream.StreamConfig {
	replicas := cmp.Or(o.Replicas, 1)
	return []jetstream.StreamConfig{
		{
			Name:        s.JobsStream(),
			Description: "runfleet job requests, one message per job",
			Subjects:    []string{s.AllJobs()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  cmp.Or(o.Duplicates, 2*time.Minute),
			Replicas:    replicas,
			AllowDirect: true, // lookups read a job's subject by direct get
		},
		{
			Name:        s.ResultsStream(),
			Description: "runfleet output pages, settlements and rejection records",
			Subjects:    []string{s.AllResults(), s.Rejected()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			// A settlement lives as long as the job's record; pages carry their own, shorter TTL
			// (named in the metadata for the workers that write them).
			MaxAge:      cmp.Or(o.Retention, DefaultRetention),
			AllowMsgTTL: true,
			Metadata:    map[string]string{job.MetadataPageTTL: cmp.Or(o.ResultsMaxAge, 24*time.Hour).String()},
			Replicas:    replicas,
			// Lookups and watches read by subject without the API's request queue or a consumer.
			AllowDirect: true,
			// Watchers follow what the stream stored, never the results subjects, which also
			// carry what it refused (a fenced worker's pages).
			RePublish: &jetstream.RePublish{
				Source:      s.Prefix() + ".results.*.*",
				Destination: s.Prefix() + ".watch.{{wildcard(1)}}.{{wildcard(2)}}",
			},
		},
		{
			Name:        s.ControlStream(),
			Description: "runfleet cancel requests",
			Subjects:    []string{s.AllCancels()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      cmp.Or(o.ControlMaxAge, 24*time.Hour),
			Replicas:    replicas,
		},
	}
}

// EnsureStreams creates the streams of s that are missing. An existing stream keeps its settings
// (they are the operator's, and shrinking them could drop jobs or results), with one exception:
// when it has fewer replicas than o asks for, it is raised to them, so that a fleet moved onto a
// cluster stops keeping its queue on one node. Replicas are never lowered.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	for _, cfg := range StreamConfigs(s, o) {
		_, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err := js.Stream(ctx, cfg.Name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", cfg.Name, err)
			}
			if err := raiseReplicas(ctx, js, st, cfg.Replicas); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	return ensureArtifacts(ctx, js, s, o)
}

// ensureArtifacts creates the artifacts bucket when it is missing, its objects living as long as
// the results that list them; an existing bucket keeps its settings but for replicas, raised as a
// stream's are, and its bound when o sets one. An object store discards new writes, so a bound
// lowered below what the bucket holds refuses puts until it drains and never drops an object.
func ensureArtifacts(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	cfg := jetstream.ObjectStoreConfig{
		Bucket:      s.ArtifactsBucket(),
		Description: "runfleet artifacts: files jobs produced, <job>/<attempt>/<path>",
		TTL:         cmp.Or(o.ResultsMaxAge, 24*time.Hour),
		Storage:     jetstream.FileStorage,
		Replicas:    cmp.Or(o.Replicas, 1),
		MaxBytes:    cmp.Or(o.ArtifactsMaxBytes, -1),
	}
	_, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil // another worker made it meanwhile
		}
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", cfg.Bucket, storageHint(err))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	st, err := js.Stream(ctx, "OBJ_"+cfg.Bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	sc := st.CachedInfo().Config
	if o.ArtifactsMaxBytes == 0 || sc.MaxBytes == o.ArtifactsMaxBytes {
		return raiseReplicas(ctx, js, st, cfg.Replicas)
	}
	sc.MaxBytes, sc.Replicas = o.ArtifactsMaxBytes, max(sc.Replicas, cfg.Replicas)
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("bound bucket %s to %d bytes: %w", cfg.Bucket, o.ArtifactsMaxBytes, storageHint(err))
	}
	return nil
}

// errCodeInsufficientResources is nats-server's JSInsufficientResourcesErr, which nats.go does
// not name.
const errCodeInsufficientResources jetstream.ErrorCode = 10047

// storageHint says what to change when a server has no room for a bound it must reserve.
func storageHint(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources {
		return fmt.Errorf("%w (lower the bound, or give the NATS servers more JetStream storage)", err)
	}
	return err
}

// raiseReplicas updates st to replicas when it has fewer, keeping every other setting.
func raiseReplicas(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, replicas int) error {
	cfg := st.CachedInfo().Config
	if cfg.Replicas >= replicas {
		return nil
	}
	cfg.Replicas = replicas
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("raise replicas of stream %s to %d: %w", cfg.Name, replicas, err)
	}
	return nil
}
