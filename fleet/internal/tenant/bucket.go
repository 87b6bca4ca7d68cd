package tenant

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// EnsureBucket opens the tenants bucket of s, creating it when it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, s job.Subjects, replicas int) (jetstream.KeyValue, error) {
	return protocol.EnsureKeyValue(ctx, js, protocol.TenantsBucketConfig(s, replicas))
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
	p, err = protocol.DecodeTenantPolicy(e.Value())
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
	return update(ctx, kv, name, true, func(p *Policy) error { f(p); return nil })
}

// ErrNoEntry is the error of [Edit] for a tenant without an entry of its own.
var ErrNoEntry = errors.New("no policy entry")

// Edit is [Update] of an existing entry only ([ErrNoEntry] else); an error of f writes nothing.
func Edit(ctx context.Context, kv jetstream.KeyValue, name string, f func(*Policy) error) (Policy, error) {
	return update(ctx, kv, name, false, f)
}

func update(ctx context.Context, kv jetstream.KeyValue, name string, create bool, f func(*Policy) error) (Policy, error) {
	if !job.ValidTenant(name) {
		return Policy{}, fmt.Errorf("tenant %q: %w", name, job.ErrInvalidTenant)
	}
	for {
		var p Policy
		var rev uint64
		e, err := kv.Get(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) && !create:
			return Policy{}, fmt.Errorf("tenant %s: %w", name, ErrNoEntry)
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return Policy{}, fmt.Errorf("read tenant %s: %w", name, err)
		default:
			if p, err = protocol.DecodeTenantPolicy(e.Value()); err != nil {
				return Policy{}, fmt.Errorf("tenant %s: %w", name, err)
			}
			rev = e.Revision()
		}
		if err := f(&p); err != nil {
			return Policy{}, err
		}
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

// EnsureSessionSecret returns the web view's session secret, making it (32 random bytes) when the
// bucket holds none. It creates, so that gateways starting at once agree on one.
func EnsureSessionSecret(ctx context.Context, kv jetstream.KeyValue) ([]byte, error) {
	for {
		e, err := kv.Get(ctx, protocol.SessionSecretKey)
		if err == nil && len(e.Value()) >= 32 {
			return e.Value(), nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read session secret: %w", err)
		}
		secret := newSecret()
		if err == nil { // too short: written by hand; replace it
			_, err = kv.Update(ctx, protocol.SessionSecretKey, secret, e.Revision())
		} else {
			_, err = kv.Create(ctx, protocol.SessionSecretKey, secret)
		}
		switch {
		case err == nil:
			return secret, nil
		case errors.Is(err, jetstream.ErrKeyExists), isWrongSequence(err):
			continue // another gateway made one first: take it
		}
		return nil, fmt.Errorf("make session secret: %w", err)
	}
}

// RotateSessionSecret replaces the session secret: every web session and form token ends.
func RotateSessionSecret(ctx context.Context, kv jetstream.KeyValue) error {
	if _, err := kv.Put(ctx, protocol.SessionSecretKey, newSecret()); err != nil {
		return fmt.Errorf("write session secret: %w", err)
	}
	return nil
}

// EndSessions records that identity's web sessions issued until at are void (a logout).
func EndSessions(ctx context.Context, kv jetstream.KeyValue, identity string, at time.Time) error {
	if _, err := kv.Put(ctx, protocol.SessionsNotBeforeKey(identity), []byte(at.UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("end sessions of %s: %w", identity, err)
	}
	return nil
}

// Delete removes tenant name's entry (its keys with it) and the record of its ended sessions.
func Delete(ctx context.Context, kv jetstream.KeyValue, name string) error {
	if !job.ValidTenant(name) {
		return fmt.Errorf("tenant %q: %w", name, job.ErrInvalidTenant)
	}
	if err := kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete tenant %s: %w", name, err)
	}
	if err := kv.Delete(ctx, protocol.SessionsNotBeforeKey(name)); err != nil {
		return fmt.Errorf("delete tenant %s: %w", name, err)
	}
	return nil
}

func newSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return b
}
