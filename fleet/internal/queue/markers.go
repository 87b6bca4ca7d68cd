package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// markers opens the fleet's consumers bucket (protocol.ConsumersBucketConfig), creating it with
// the jobs stream st's replicas when it is missing.
func markers(ctx context.Context, js jetstream.JetStream, s job.Subjects, st jetstream.Stream) (jetstream.KeyValue, error) {
	return protocol.EnsureKeyValue(ctx, js, protocol.ConsumersBucketConfig(s, st.CachedInfo().Config.Replicas))
}

// marked reads marker key; ok is false when it is not set. A marker set before the bucket, in
// the jobs stream st's metadata, counts too.
func marked(ctx context.Context, kv jetstream.KeyValue, st jetstream.Stream, key string) (value string, ok bool, err error) {
	e, err := kv.Get(ctx, key)
	switch {
	case err == nil:
		return string(e.Value()), true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return "", false, fmt.Errorf("read marker %s: %w", key, err)
	}
	value, ok = st.CachedInfo().Config.Metadata[key]
	return value, ok, nil
}

// mark sets marker key to at unless it is set, and returns what it holds: a create, which the
// bucket refuses when the key exists (its expected revision is 0), so no writer erases or
// rewrites another's marker.
func mark(ctx context.Context, kv jetstream.KeyValue, key string, at time.Time) (string, error) {
	value := at.UTC().Format(time.RFC3339Nano)
	_, err := kv.Create(ctx, key, []byte(value))
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := kv.Get(ctx, key)
		if gerr != nil {
			return "", fmt.Errorf("read marker %s: %w", key, gerr)
		}
		return string(e.Value()), nil
	}
	if err != nil {
		return "", fmt.Errorf("set marker %s: %w", key, err)
	}
	return value, nil
}

// Made lists the tenants of queue that have had a consumer ([protocol.TenantMadeKey]): one of
// them whose consumer is missing lost it.
func Made(ctx context.Context, js jetstream.JetStream, s job.Subjects, queue string) ([]Pair, error) {
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeysFiltered(ctx, protocol.TenantsMadeFilter(queue))
	if err != nil {
		return nil, fmt.Errorf("list tenants made on %s: %w", queue, err)
	}
	var out []Pair
	prefix := strings.TrimSuffix(protocol.TenantsMadeFilter(queue), "*")
	for k := range keys.Keys() {
		if tenant, ok := strings.CutPrefix(k, prefix); ok && job.ValidTenant(tenant) {
			out = append(out, Pair{Queue: queue, Tenant: tenant})
		}
	}
	return out, nil
}

// MarkMade marks that p has a consumer, made at created ([protocol.TenantMadeKey]), unless it was
// marked before.
func MarkMade(ctx context.Context, js jetstream.JetStream, s job.Subjects, p Pair, created time.Time) error {
	st, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.JobsStream(), err)
	}
	kv, err := markers(ctx, js, s, st)
	if err != nil {
		return err
	}
	_, err = mark(ctx, kv, protocol.TenantMadeKey(p.Queue, p.Tenant), created)
	return err
}
