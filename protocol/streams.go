package protocol

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// StreamOptions are the settings of the streams a fleet creates when they are missing. Zero fields
// take the defaults of docs/protocol.md.
type StreamOptions struct {
	// Duplicates is the jobs stream's Nats-Msg-Id window; default (and at least) JobsDuplicates.
	// It is set on an existing jobs stream too: the window is stream-wide, so one tenant's header
	// could drop another's publish within it (docs/protocol.md, "Publishing an id twice").
	Duplicates time.Duration

	// Retention is how long the fleet keeps a job's record: the jobs stream keeps its request that
	// long (its MaxAge, and with it how long a job id stays taken), and the results stream its
	// settlement, while its pages carry a per-message TTL of ResultsMaxAge; default
	// DefaultRetention. Like JobsMaxBytes, a non-zero value is also set on an existing jobs
	// stream: the workers' --retention and --jobs-max-bytes rule.
	Retention time.Duration
	// JobsMaxBytes bounds the jobs stream: a publish past it is refused (the client's
	// ErrStreamFull) and nothing stored is dropped; default DefaultJobsMaxBytes.
	JobsMaxBytes int64

	ResultsMaxAge time.Duration // how long output pages and artifacts are kept; default 24 h
	ControlMaxAge time.Duration // default 24 h
	Replicas      int           // default 1; an existing stream with fewer is raised to it

	// ArtifactsMaxBytes bounds the artifacts bucket, new or existing: a put past it fails and
	// nothing stored is dropped. JetStream reserves it on the servers, which must have room. Zero
	// leaves the bound to the workers, which set it at start (--artifacts-max-bytes, default
	// DefaultArtifactsMaxBytes).
	ArtifactsMaxBytes int64
}

// Defaults of the worker's --artifacts-max-bytes, --jobs-max-bytes and --retention.
const (
	DefaultArtifactsMaxBytes = 10 << 30
	DefaultJobsMaxBytes      = 10 << 30
	DefaultRetention         = 7 * 24 * time.Hour
)

// jobsMaxConsumers is the jobs stream's explicit consumer bound. Left unset (or -1) the server
// applies its default_max_consumers, 1,000 on nats-server 2.15, which consumers laid out per
// queue and tenant would reach at 1,000 tenants.
const jobsMaxConsumers = 100_000

// JobsDuplicates is the jobs stream's duplicate window: the server's minimum. Version-3 clients
// send no Nats-Msg-Id; a job's subject, which names its tenant, is what refuses a second copy.
const JobsDuplicates = 100 * time.Millisecond

// StreamConfigs returns the configurations of the three streams of s.
func StreamConfigs(s job.Subjects, o StreamOptions) []jetstream.StreamConfig {
	replicas := cmp.Or(o.Replicas, 1)
	return []jetstream.StreamConfig{
		{
			Name:        s.JobsStream(),
			Description: "runfleet job requests (protocol version 3), one subject and one message per job",
			// Exactly <queue>.<tenant>.<job>: a publish on any other shape (a version-1 subject)
			// is stored by no stream and fails.
			Subjects:  []string{s.Job("*", "*", "*")},
			Retention: jetstream.LimitsPolicy,
			Storage:   jetstream.FileStorage,
			// One message per job subject, a second publish refused: an id stays taken for as long
			// as its request is kept, not only for the duplicate window.
			MaxMsgsPerSubject:    1,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			MaxAge:               cmp.Or(o.Retention, DefaultRetention),
			MaxBytes:             cmp.Or(o.JobsMaxBytes, DefaultJobsMaxBytes),
			AllowDirect:          true,
			MaxConsumers:         jobsMaxConsumers,
			Duplicates:           max(o.Duplicates, JobsDuplicates),
			Replicas:             replicas,
			// Every worker hears of each stored job's queue and tenant, headers only, and so
			// knows which tenants have jobs waiting without asking the server (internal/fairshare).
			RePublish: &jetstream.RePublish{
				Source:      s.Job("*", "*", "*"),
				Destination: s.Prefix() + ".arrived.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}",
				HeadersOnly: true,
			},
		},
		{
			Name:        s.ResultsStream(),
			Description: "runfleet output pages, settlements and rejection records",
			Subjects:    []string{s.AllResults(), s.Rejected(), s.AllDispatched()},
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
				Source:      s.Prefix() + ".results.*.*.*",
				Destination: s.Prefix() + ".watch.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}",
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
// (they are the operator's, and shrinking them could drop jobs or results), with two exceptions:
// when it has fewer replicas than o asks for, it is raised to them, so that a fleet moved onto a
// cluster stops keeping its queue on one node (replicas are never lowered); and the jobs stream
// takes o's Retention and JobsMaxBytes when they are set, and its duplicate window always. A
// bound lowered below what the stream holds refuses new jobs until it drains: the stream
// discards new messages, never stored ones.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	// keep is how long the jobs stream keeps a request. The results stream keeps a job's dispatch
	// marker at least that long: a request redelivered after its marker expired would pass the
	// dispatch gate again.
	var keep time.Duration
	for _, cfg := range StreamConfigs(s, o) {
		if cfg.Name == s.ResultsStream() && keep > cfg.MaxAge {
			cfg.MaxAge = keep
		}
		_, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err := js.Stream(ctx, cfg.Name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", cfg.Name, err)
			}
			if cfg.Name == s.JobsStream() {
				keep, err = boundJobs(ctx, js, st, o, cfg)
			} else {
				err = raiseReplicas(ctx, js, st, cfg)
			}
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		if cfg.Name == s.JobsStream() {
			keep = cfg.MaxAge
		}
	}
	if err := ensureConsumers(ctx, js, s, o); err != nil {
		return err
	}
	return ensureArtifacts(ctx, js, s, o)
}

// ensureConsumers creates the consumers bucket when it is missing; an existing one keeps its
// settings. (A worker that finds none makes it too, with the jobs stream's replicas.)
func ensureConsumers(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	_, err := EnsureKeyValue(ctx, js, ConsumersBucketConfig(s, o.Replicas))
	return err
}

// EnsureKeyValue opens the key-value bucket cfg names, creating it when it is missing (an
// existing one keeps its settings); one another process made meanwhile is opened. Every request
// is asked again while unanswered (AskAgain): processes starting at once on a cluster create and
// look up the same replicated bucket.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	lookup := func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		return err
	}
	err := AskAgain(ctx, lookup)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		err = AskAgain(ctx, func(ctx context.Context) (err error) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			return err
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = AskAgain(ctx, lookup)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// ensureArtifacts creates the artifacts bucket when it is missing, its objects living as long as
// the results that list them; an existing bucket keeps its settings but for replicas, raised as a
// stream's are, and its bound when o sets one. An object store discards new writes, so a bound
// lowered below what the bucket holds refuses puts until it drains and never drops an object.
func ensureArtifacts(ctx context.Context, js jetstream.JetStream, s job.Subjects, o StreamOptions) error {
	cfg := jetstream.ObjectStoreConfig{
		Bucket:      s.ArtifactsBucket(),
		Description: "runfleet artifacts: files jobs produced, <tenant>/<job>/<attempt>/<path>",
		TTL:         cmp.Or(o.ResultsMaxAge, 24*time.Hour),
		Storage:     jetstream.FileStorage,
		Replicas:    cmp.Or(o.Replicas, 1),
		MaxBytes:    cmp.Or(o.ArtifactsMaxBytes, -1),
	}
	err := AskAgain(ctx, func(ctx context.Context) error {
		_, err := js.ObjectStore(ctx, cfg.Bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		err = AskAgain(ctx, func(ctx context.Context) error {
			_, err := js.CreateObjectStore(ctx, cfg)
			return err
		})
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
	var st jetstream.Stream
	err = AskAgain(ctx, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, "OBJ_"+cfg.Bucket)
		return err
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	sc := st.CachedInfo().Config
	if o.ArtifactsMaxBytes == 0 || sc.MaxBytes == o.ArtifactsMaxBytes {
		return raiseReplicas(ctx, js, st, jetstream.StreamConfig{Replicas: cfg.Replicas, RePublish: st.CachedInfo().Config.RePublish})
	}
	sc.MaxBytes, sc.Replicas = o.ArtifactsMaxBytes, max(sc.Replicas, cfg.Replicas)
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("bound bucket %s to %d bytes: %w", cfg.Bucket, o.ArtifactsMaxBytes, storageHint(err))
	}
	return nil
}

// JetStream error codes that nats.go does not name, as nats-server defines them.
const (
	// ErrCodeInsufficientResources is JSInsufficientResourcesErr: the servers have no room for
	// what a stream or bucket must reserve, or store.
	ErrCodeInsufficientResources jetstream.ErrorCode = 10047
	// ErrCodeStoreFailed is JSStreamStoreFailedF: a publish the stream refused to store, its
	// description saying which limit refused it.
	ErrCodeStoreFailed jetstream.ErrorCode = 10077
)

// storageHint says what to change when a server has no room for a bound it must reserve.
func storageHint(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeInsufficientResources {
		return fmt.Errorf("%w (lower the bound, or give the NATS servers more JetStream storage)", err)
	}
	return err
}

// boundJobs sets o's Retention and JobsMaxBytes, where non-zero, and want's duplicate window on the
// existing jobs stream st, and raises its replicas and sets its republish as [raiseReplicas] does,
// in one update.
func boundJobs(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, o StreamOptions, want jetstream.StreamConfig) (time.Duration, error) {
	cfg := st.CachedInfo().Config
	age, size := cmp.Or(o.Retention, cfg.MaxAge), cmp.Or(o.JobsMaxBytes, cfg.MaxBytes)
	if cfg.MaxAge == age && cfg.MaxBytes == size && cfg.Duplicates == want.Duplicates && cfg.Replicas >= want.Replicas && samePublish(cfg.RePublish, want.RePublish) {
		return age, nil
	}
	cfg.MaxAge, cfg.MaxBytes, cfg.Duplicates = age, size, want.Duplicates
	cfg.Replicas, cfg.RePublish = max(cfg.Replicas, want.Replicas), want.RePublish
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return 0, fmt.Errorf("update stream %s (max age %v, %d bytes, %d replicas): %w", cfg.Name, age, size, cfg.Replicas, storageHint(err))
	}
	return age, nil
}

// raiseReplicas updates st to want's replicas when it has fewer, keeping every other setting but
// its republish, its subjects and a longer MaxAge, which the fleet's watches and workers rely on: a
// stream made by an earlier version gets want's republish and the subjects it lacks.
func raiseReplicas(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, want jetstream.StreamConfig) error {
	cfg := st.CachedInfo().Config
	// Subjects a later version added (the dispatch markers) join; none is ever taken away, so
	// that workers of two versions side by side never undo each other.
	missing := slices.DeleteFunc(slices.Clone(want.Subjects), func(sub string) bool { return slices.Contains(cfg.Subjects, sub) })
	// A longer MaxAge is taken (the results stream's follows the jobs stream's), a shorter never:
	// 0 is none at all.
	longer := cfg.MaxAge != 0 && want.MaxAge > cfg.MaxAge
	if cfg.Replicas >= want.Replicas && samePublish(cfg.RePublish, want.RePublish) && len(missing) == 0 && !longer {
		return nil
	}
	cfg.Replicas, cfg.RePublish = max(cfg.Replicas, want.Replicas), want.RePublish
	cfg.Subjects = append(cfg.Subjects, missing...)
	if longer {
		cfg.MaxAge = want.MaxAge
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("update stream %s (%d replicas, republish, subjects): %w", cfg.Name, cfg.Replicas, err)
	}
	return nil
}

func samePublish(a, b *jetstream.RePublish) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// answerWait bounds one JetStream API request of [AskAgain]: the API answers in milliseconds.
const answerWait = 2 * time.Second

// AskAgain calls f with a context of its own, bounded by answerWait, and again while ctx lasts
// when f's request went unanswered. In a cluster, a request about a stream created a moment ago
// that has no leader yet gets no answer at all: two workers starting at once, one creating a
// replicated bucket as the other looks it up, left the second waiting out its whole start budget.
// f must be safe to repeat (a lookup, a create that tells an existing stream apart).
func AskAgain(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, answerWait)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}
