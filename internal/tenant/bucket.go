package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
)

// EnsureBucket opens the tenants bucket of s, creating it when it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, s job.Subjects, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, s.TenantsBucket())
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", s.TenantsBucket(), err)
		}
		return kv, nil
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       s.TenantsBucket(),
		Description:  "runfleet tenant policies (docs/protocol.md, Tenants), one JSON value per tenant",
		History:      5,
		MaxValueSize: maxEntry,
		Storage:      jetstream.FileStorage,
		Replicas:     max(replicas, 1),
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, s.TenantsBucket())
	}
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", s.TenantsBucket(), err)
	}
	return kv, nil
}

// Get reads tenant name's own entry; ok is false when it has none.
func Get(ctx context.Context, kv jetstream.KeyValue, name string) (p Policy, ok bool, err error) {
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Policy{}, false, nil
	}
	if err != nil {
		return Policy{}, false, fmt.Errorf("read tenant %s: %w", name, err)
	}
	p, err = Decode(e.Value())
	if err != nil {
		return Policy{}, false, fmt.Errorf("tenant %s: %w", name, err)
	}
	return p, true, nil
}

// Put writes tenant name's entry.
func Put(ctx context.Context, kv jetstream.KeyValue, name string, p Policy) error {
	if !job.ValidTenant(name) {
		return fmt.Errorf("tenant %q: %w", name, job.ErrInvalidTenant)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode tenant %s: %w", name, err)
	}
	if _, err := kv.Put(ctx, name, b); err != nil {
		return fmt.Errorf("write tenant %s: %w", name, err)
	}
	return nil
}

// Update reads tenant name's entry, changes it with f and writes it back, again if another writer
// came in between, so that two operators adding keys at once both keep theirs.
func Update(ctx context.Context, kv jetstream.KeyValue, name string, f func(*Policy)) (Policy, error) {
	if !job.ValidTenant(name) {
		return Policy{}, fmt.Errorf("tenant %q: %w", name, job.ErrInvalidTenant)
	}
	for {
		var p Policy
		var rev uint64
		e, err := kv.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return Policy{}, fmt.Errorf("read tenant %s: %w", name, err)
		default:
			if p, err = Decode(e.Value()); err != nil {
				return Policy{}, fmt.Errorf("tenant %s: %w", name, err)
			}
			rev = e.Revision()
		}
		f(&p)
		if err := p.Validate(); err != nil {
			return Policy{}, err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return Policy{}, fmt.Errorf("encode tenant %s: %w", name, err)
		}
		if rev == 0 {
			_, err = kv.Create(ctx, name, b)
		} else {
			_, err = kv.Update(ctx, name, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
			continue
		}
		if err != nil {
			return Policy{}, fmt.Errorf("write tenant %s: %w", name, err)
		}
		return p, nil
	}
}

// isWrongSequence reports a conditional write that lost to another writer.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
