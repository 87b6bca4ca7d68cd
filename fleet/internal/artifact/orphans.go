package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OrphanAge is how long the last chunk of a put with no metadata must have been stored before
// [PurgeOrphans] takes the put for dead: far longer than a collection's budget, which bounds
// every put a worker makes.
const OrphanAge = 10 * time.Minute

// PurgeOrphans removes the chunks of bucket that no object's metadata names and whose last chunk
// was stored before cutoff: what a put left when its worker was killed, or when its budget ended
// before nats.go could purge them. It returns how many puts' chunks it removed.
//
// An object store keeps a put's chunks on $O.<bucket>.C.<nuid> and writes the metadata naming
// that nuid after the last chunk; until then no sweep of names can find them.
func PurgeOrphans(ctx context.Context, js jetstream.JetStream, bucket string, cutoff time.Time) (int, error) {
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return 0, fmt.Errorf("purge orphan chunks of %s: %w", bucket, err)
	}
	prefix := "$O." + bucket + ".C."
	// Chunks first, names after: a put that ends in between has its metadata listed.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, fmt.Errorf("purge orphan chunks of %s: list chunks: %w", bucket, err)
	}
	if len(info.State.Subjects) == 0 {
		return 0, nil
	}
	named, err := namedChunks(ctx, st, bucket)
	if err != nil {
		return 0, fmt.Errorf("purge orphan chunks of %s: %w", bucket, err)
	}
	purged := 0
	var errs []error
	for subj := range info.State.Subjects {
		if named[strings.TrimPrefix(subj, prefix)] {
			continue
		}
		last, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", subj, err))
			continue
		}
		if !last.Time.Before(cutoff) {
			continue // a put still writing, or just done
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			errs = append(errs, fmt.Errorf("purge %s: %w", subj, err))
			continue
		}
		purged++
	}
	if err := errors.Join(errs...); err != nil {
		return purged, fmt.Errorf("purge orphan chunks of %s: %w", bucket, err)
	}
	return purged, nil
}

// namedChunks returns the nuids that the metadata of bucket's objects name, deleted ones included.
// It reads the metadata with a consumer of its own rather than ObjectStore.List, whose watcher
// was seen waiting forever on a bucket whose objects were being deleted.
func namedChunks(ctx context.Context, st jetstream.Stream, bucket string) (map[string]bool, error) {
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     "$O." + bucket + ".M.>",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("read object metadata: %w", err)
	}
	defer func() { _ = st.DeleteConsumer(context.WithoutCancel(ctx), c.CachedInfo().Name) }()
	named := map[string]bool{}
	if c.CachedInfo().NumPending == 0 {
		return named, nil
	}
	for ctx.Err() == nil {
		batch, err := c.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("read object metadata: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			var info struct {
				NUID string `json:"nuid"`
			}
			if json.Unmarshal(m.Data(), &info) == nil && info.NUID != "" {
				named[info.NUID] = true
			}
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				last = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("read object metadata: %w", err)
		}
		if got == 0 || last {
			return named, nil
		}
	}
	return nil, ctx.Err()
}
