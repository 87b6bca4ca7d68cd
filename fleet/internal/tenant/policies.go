package tenant

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/protocol"
)

// Policies is a live view of the tenants bucket. Its zero value is empty (every tenant without
// limits) and ready to follow a bucket.
type Policies struct {
	mu      sync.RWMutex
	entries map[string]Policy
	keys    []keyEntry
	// The web view's session state, kept in the same bucket under reserved keys.
	secret    []byte
	notBefore map[string]time.Time
	loaded    chan struct{}
	once      sync.Once

	// queues is the fleet's queue declarations, nil while the bucket holds none.
	queues *protocol.Queues
}

type keyEntry struct {
	digest [32]byte
	tenant string
}

func (p *Policies) init() {
	p.once.Do(func() { p.loaded = make(chan struct{}) })
}

// Loaded is closed once the view holds what the bucket held when it was first read.
func (p *Policies) Loaded() <-chan struct{} {
	p.init()
	return p.loaded
}

// Of returns tenant's policy: its own entry, else the "default" entry, else no limits.
func (p *Policies) Of(tenant string) Policy {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if e, ok := p.entries[tenant]; ok {
		return e
	}
	return p.entries[protocol.DefaultTenantPolicy]
}

// Has reports whether tenant has an entry of its own.
func (p *Policies) Has(tenant string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.entries[tenant]
	return ok
}

// Names returns the tenants with an entry, sorted.
func (p *Policies) Names() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	names := make([]string, 0, len(p.entries))
	for n := range p.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ForKey returns the tenant whose policy lists key's digest. It compares against every key, in
// constant time each.
func (p *Policies) ForKey(key string) (tenant string, ok bool) {
	d := [32]byte{}
	if b, err := hex.DecodeString(HashKey(key)); err == nil {
		copy(d[:], b)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, k := range p.keys {
		if subtle.ConstantTimeCompare(k.digest[:], d[:]) == 1 && !ok {
			tenant, ok = k.tenant, true
		}
	}
	return tenant, ok
}

// Set puts tenant's policy into the view, as a watch does; tests and a gateway without a bucket use it.
func (p *Policies) Set(tenant string, pol Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[string]Policy{}
	}
	p.entries[tenant] = pol
	p.rekey()
}

func (p *Policies) remove(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, tenant)
	p.rekey()
}

// rekey rebuilds the key index; the caller holds mu.
func (p *Policies) rekey() {
	p.keys = p.keys[:0]
	for t, e := range p.entries {
		for _, k := range e.APIKeysSHA256 {
			var d [32]byte
			if b, err := hex.DecodeString(k); err == nil && len(b) == 32 {
				copy(d[:], b)
				p.keys = append(p.keys, keyEntry{digest: d, tenant: t})
			}
		}
	}
}

// Follow keeps the view equal to bucket kv until ctx ends, watching it again after a failed
// watch. An entry that does not decode is logged and leaves the tenant without an entry (the
// default's policy), rather than stopping the watch.
func (p *Policies) Follow(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger) error {
	p.init()
	for {
		err := p.watch(ctx, kv, log)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("tenant policies watch ended; watching again", "err", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil
		}
	}
}

func (p *Policies) watch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	seen := map[string]bool{}
	initial := true
	for e := range w.Updates() {
		if e == nil { // the end of the initial values
			if initial {
				initial = false
				p.dropExcept(seen)
				p.markLoaded()
			}
			continue
		}
		if initial {
			seen[e.Key()] = true
		}
		if protocol.IsReservedTenantKey(e.Key()) {
			p.reserved(e, log)
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			p.remove(e.Key())
			continue
		}
		pol, err := protocol.DecodeTenantPolicy(e.Value())
		if err != nil { // counts as absent: the tenant takes the default's entry
			log.Error("tenant policy ignored", "tenant", e.Key(), "err", err)
			p.remove(e.Key())
			continue
		}
		p.Set(e.Key(), pol)
	}
	return errors.New("watch closed")
}

// dropExcept removes entries a new watch did not find: deleted while no watch ran.
func (p *Policies) dropExcept(seen map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t := range p.entries {
		if !seen[t] {
			delete(p.entries, t)
		}
	}
	for id := range p.notBefore {
		if !seen[protocol.SessionsNotBeforeKey(id)] {
			delete(p.notBefore, id)
		}
	}
	if !seen[protocol.QueuesKey] {
		p.queues = nil
	}
	p.rekey()
}

func (p *Policies) markLoaded() {
	select {
	case <-p.loaded:
	default:
		close(p.loaded)
	}
}

// reserved applies an entry of a reserved key: the session secret, or when an identity's
// sessions were last ended. A deleted secret is kept: sessions stay valid until one is written.
func (p *Policies) reserved(e jetstream.KeyValueEntry, log *slog.Logger) {
	put := e.Operation() == jetstream.KeyValuePut
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.Key() == protocol.QueuesKey {
		p.queues = nil
		if !put {
			return
		}
		q, err := protocol.DecodeQueues(e.Value())
		if err != nil { // fail closed: an unreadable declaration declares queue default only
			log.Error("queue declarations ignored: only queue default is declared", "err", err)
			q = protocol.Queues{}
		}
		p.queues = &q
		return
	}
	if e.Key() == protocol.SessionSecretKey {
		if put && len(e.Value()) >= 32 {
			p.secret = slices.Clone(e.Value())
		} else if put {
			log.Error("session secret ignored: shorter than 32 bytes", "bytes", len(e.Value()))
		}
		return
	}
	id, ok := protocol.SessionsIdentity(e.Key())
	if !ok {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, string(e.Value()))
	if !put || err != nil {
		delete(p.notBefore, id)
		return
	}
	if p.notBefore == nil {
		p.notBefore = map[string]time.Time{}
	}
	p.notBefore[id] = at
}

// QueueAllowed reports, as protocol.QueueAllowed does with the declarations the view holds,
// whether tenant may store a job on queue; served says whether a worker serves a queue, for a
// fleet that declares none.
func (p *Policies) QueueAllowed(queue, tenant string, served func(queue string) bool) error {
	p.mu.RLock()
	q := p.queues
	p.mu.RUnlock()
	return protocol.QueueAllowed(q, served, queue, tenant)
}

// Declared reports whether the fleet declares its queues (the bucket holds protocol.QueuesKey).
func (p *Policies) Declared() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.queues != nil
}

// DeclaredQueues names the queues the fleet declares, sorted; none while it declares none.
func (p *Policies) DeclaredQueues() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.queues == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(p.queues.Queues))
}

// SetQueues puts the fleet's queue declarations into the view, as a watch does; nil is none.
func (p *Policies) SetQueues(q *protocol.Queues) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queues = q
}

// SessionSecret is the web view's current session secret; nil until one was read.
func (p *Policies) SessionSecret() []byte {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.secret
}

// SetSessionSecret puts the session secret into the view, as a watch does.
func (p *Policies) SetSessionSecret(secret []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secret = slices.Clone(secret)
}

// SessionsNotBefore is when identity's web sessions were last ended (zero: never): a session
// issued until then is void.
func (p *Policies) SessionsNotBefore(identity string) time.Time {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.notBefore[identity]
}

// SetSessionsNotBefore puts when identity's sessions were ended into the view, as a watch does.
func (p *Policies) SetSessionsNotBefore(identity string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.notBefore == nil {
		p.notBefore = map[string]time.Time{}
	}
	if at.After(p.notBefore[identity]) {
		p.notBefore[identity] = at
	}
}

// Digests returns the key digests tenant's own entry lists; none when it has no entry.
func (p *Policies) Digests(tenant string) []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.entries[tenant].APIKeysSHA256)
}
