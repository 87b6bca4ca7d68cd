package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/job"
)

// A request acts for a tenant (docs/protocol.md, "Tenants"): a key listed in a tenant's policy
// acts for that tenant and reaches its jobs only; the operator's key acts for tenant default, may
// name another with ?tenant=, and reaches every tenant's jobs. A job is its tenant and its id
// (protocol version 3): a tenant's key names a job of its own tenant whatever the id, so another
// tenant's job of the same id is never reached, and is answered exactly as an id the fleet does
// not hold.

// caller is who a request acts for.
type caller struct {
	tenant    string // the tenant its jobs are filed under
	operator  bool   // the operator's key: may name another tenant with ?tenant=
	anyTenant bool   // may reach every tenant's jobs: the operator
}

type callerKey struct{}

// withCaller is r acting for c, for a request that does not pass authenticate (the web view's).
func withCaller(r *http.Request, c caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

// setCaller records that r acts for c.
func setCaller(r *http.Request, c caller) {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		info.caller = c
	}
}

// callerOf is who r acts for; a request that did not pass authenticate acts for no tenant and
// sees no job.
func callerOf(r *http.Request) caller {
	if c, ok := r.Context().Value(callerKey{}).(caller); ok {
		return c
	}
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return info.caller
	}
	return caller{}
}

// submitTenant is the tenant a submit of r files its job under: the key's own, or for the
// operator the one ?tenant= names (writeTenantError answers its error).
func submitTenant(r *http.Request) (string, error) {
	c := callerOf(r)
	name := r.URL.Query().Get("tenant")
	switch {
	case name == "" || name == c.tenant:
		return c.tenant, nil
	case !job.ValidTenant(name):
		return "", fmt.Errorf("tenant %q: %w", clip(name), job.ErrInvalidTenant)
	case !c.operator:
		return "", errOtherTenant
	}
	return name, nil
}

// errOtherTenant is a tenant's key naming another tenant.
var errOtherTenant = errors.New("this key acts for its own tenant only")

// tenantStatus is the HTTP status of an error of submitTenant, on every API: 403 for a key naming
// another tenant, 400 for a name that is not a tenant's.
func tenantStatus(err error) int {
	if errors.Is(err, errOtherTenant) {
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// writeTenantError answers an error of submitTenant natively.
func writeTenantError(w http.ResponseWriter, err error) {
	status, reason := tenantStatus(err), "invalid_tenant"
	if status == http.StatusForbidden {
		reason = "forbidden"
	}
	writeError(w, status, reason, err.Error())
}

// as is a client acting for tenant, a valid name: its calls by id reach tenant's jobs only.
func (g *Gateway) as(tenant string) *runfleet.Client {
	c, err := g.inspector.Tenant(tenant)
	if err != nil {
		panic(err) // tenants come from keys, policies and checked parameters
	}
	return c
}

// jobClient returns a client of the tenant whose job id r's route names, and reports false
// when it answered r itself. A tenant's key names its own tenant's job: nothing is looked up,
// and an id the tenant does not hold is answered 404 by the route, whatever other tenants hold.
// The operator's key names the tenant with ?tenant=; without it, the one tenant whose request
// of id the jobs stream keeps (one stream info, its subjects filtered by the id), 409
// ambiguous_id when several do, and tenant default when none does.
func (g *Gateway) jobClient(w http.ResponseWriter, r *http.Request, id string) (*runfleet.Client, bool) {
	c := callerOf(r)
	if !c.anyTenant {
		if name := r.URL.Query().Get("tenant"); name != "" && name != c.tenant {
			writeTenantError(w, errOtherTenant)
			return nil, false
		}
		if c.tenant == "" {
			writeError(w, http.StatusNotFound, "not_found", "the fleet holds no job "+id)
			return nil, false
		}
		return g.as(c.tenant), true
	}
	if name := r.URL.Query().Get("tenant"); name != "" {
		if !job.ValidTenant(name) {
			writeError(w, http.StatusBadRequest, "invalid_tenant", fmt.Sprintf("tenant %q: %v", clip(name), job.ErrInvalidTenant))
			return nil, false
		}
		return g.as(name), true
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	tenants, err := g.inspector.Tenants(ctx, id)
	switch {
	case err != nil:
		g.log.Warn("find the tenants of a job", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the jobs stream; retry later")
		return nil, false
	case len(tenants) > 1:
		writeJSON(w, http.StatusConflict, struct {
			errorBody
			Tenants []string `json:"tenants"`
		}{errorBody{Reason: "ambiguous_id", Detail: fmt.Sprintf("%d tenants hold a job %s: name one with ?tenant=", len(tenants), id)}, tenants})
		return nil, false
	case len(tenants) == 1:
		return g.as(tenants[0]), true
	}
	return g.as(job.DefaultTenant), true
}

// tenantLabel is tenant as a metric label: a tenant without a policy of its own shares "other",
// so that any number of tenant names makes a bounded number of series.
func (g *Gateway) tenantLabel(tenant string) string {
	if g.tenants.Has(tenant) {
		return tenant
	}
	return "other"
}

// backlogTTL is how old the shared snapshot of the tenants' backlogs may be.
const backlogTTL = 250 * time.Millisecond

// backlogReadTimeout bounds one read of the tenant consumers.
const backlogReadTimeout = 5 * time.Second

// Load is a tenant's jobs now: waiting (stored, not yet delivered) and running (delivered, not
// yet acked), summed over its queues.
type Load struct {
	Queued  uint64
	Running int
}

// backlogs is one snapshot of every tenant's load, shared by all requests and read from the
// server (queue.Tenants) at most once per backlogTTL, however many submits ask. Jobs this
// gateway admitted since its read began are added on top, so that a burst through one gateway
// cannot pass max_queued between two reads.
type backlogs struct {
	mu      sync.Mutex
	at      time.Time
	load    map[string]Load
	err     error
	reading chan struct{} // non-nil while a read is under way; closed when it ends
	since   map[string]int64
}

// snapshot returns the tenants' load no older than backlogTTL, reading it when it is older. One
// request reads; the others wait for its read.
func (g *Gateway) snapshot(ctx context.Context) (map[string]Load, error) {
	b := &g.backlogs
	for {
		b.mu.Lock()
		if b.reading == nil && time.Since(b.at) < backlogTTL {
			load, err := b.load, b.err
			b.mu.Unlock()
			return load, err
		}
		if ch := b.reading; ch != nil {
			b.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		b.reading = ch
		base := make(map[string]int64, len(b.since))
		for t, n := range b.since {
			base[t] = n
		}
		b.mu.Unlock()

		// The read outlives the request that started it: the others wait for it too.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backlogReadTimeout)
		pairs, err := queue.Tenants(rctx, g.js, g.subjects)
		cancel()
		load := map[string]Load{}
		for p, bl := range pairs {
			l := load[p.Tenant]
			l.Queued += bl.Pending
			l.Running += bl.AckPending
			load[p.Tenant] = l
		}
		b.mu.Lock()
		b.reading, b.at, b.err = nil, time.Now(), err
		if err == nil {
			b.load = load
			// What the read may have counted leaves the local count; later admissions stay.
			for t, n := range base {
				if b.since[t] -= n; b.since[t] <= 0 {
					delete(b.since, t)
				}
			}
		}
		close(ch)
		b.mu.Unlock()
	}
}

// errQueueFull is a submit past its tenant's max_queued.
var errQueueFull = errors.New("tenant_queue_full")

// queueFullError says which bound refused a submit.
type queueFullError struct {
	tenant        string
	queued, limit int64
}

func (e *queueFullError) Error() string {
	return fmt.Sprintf("tenant %s has %d jobs queued, at most %d (max_queued); nothing was stored, retry later", e.tenant, e.queued, e.limit)
}

func (e *queueFullError) Is(target error) bool { return target == errQueueFull }

// reserve admits one job of tenant against its max_queued and counts it until the next read of
// the backlogs; the caller calls release when the job was not stored after all. It is a submit's
// only check: the gateway's client and inspector store without one of their own. The count is
// advisory: jobs that other gateways and direct NATS publishers store within one backlogTTL,
// plus those a read in flight misses, may pass the bound. When the backlogs cannot be read,
// the job is admitted (the bound is advisory; the publish itself tells whether the fleet is
// there).
func (g *Gateway) reserve(ctx context.Context, tenant string) (release func(), err error) {
	policy := g.tenants.Of(tenant)
	if policy.MaxQueued <= 0 {
		return func() {}, nil
	}
	load, err := g.snapshot(ctx)
	if err != nil {
		g.log.Warn("read tenant backlogs: admitting without the count", "tenant", tenant, "err", err)
	}
	b := &g.backlogs
	b.mu.Lock()
	defer b.mu.Unlock()
	queued := int64(load[tenant].Queued) + b.since[tenant]
	if !policy.AdmitsQueued(queued) {
		return nil, &queueFullError{tenant: tenant, queued: queued, limit: policy.MaxQueued}
	}
	if b.since == nil {
		b.since = map[string]int64{}
	}
	b.since[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.since[tenant] > 0 {
				b.since[tenant]--
			}
		})
	}, nil
}

// queueFullRetry is the Retry-After of a tenant_queue_full: the time its jobs take to start is
// not known here, so a short pause.
const queueFullRetry = 1

// TenantLoads is every tenant's load now, from the shared snapshot.
func (g *Gateway) TenantLoads(ctx context.Context) (map[string]Load, error) {
	return g.snapshot(ctx)
}

// operatorOnly serves next to the operator's key only: what it shows spans every tenant.
func (g *Gateway) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !callerOf(r).operator {
			writeError(w, http.StatusForbidden, "forbidden", "the operator's key only")
			return
		}
		next.ServeHTTP(w, r)
	})
}
