package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/webui"
	"github.com/runfleet/runfleet/protocol"
)

// newUI makes the web view on the gateway's client and keys. Its sessions are signed with the
// secret the tenants bucket holds (made by the first gateway, shared by all), never with one
// derived from a key: a tenant's own cookie must not be a way to guess the operator's key.
func (g *Gateway) newUI(ctx context.Context) (*webui.UI, error) {
	if g.tenantsKV != nil {
		secret, err := tenant.EnsureSessionSecret(ctx, g.tenantsKV)
		if err != nil {
			return nil, err
		}
		g.tenants.SetSessionSecret(secret)
	} else if g.tenants.SessionSecret() == nil {
		// No bucket: a secret of this process's own; its sessions end with it.
		secret := make([]byte, 32)
		rand.Read(secret)
		g.tenants.SetSessionSecret(secret)
	}
	// The view checks a session's access to a job, and names its tenant, before it serves the
	// job's artifact.
	artifact := func(w http.ResponseWriter, r *http.Request) { g.artifact(w, withCaller(r, caller{anyTenant: true})) }
	return webui.New(webui.Options{Client: g.client, Inspector: g.inspector, NATS: g.nc, Logger: g.log,
		Secret: g.tenants.SessionSecret, Keys: g.sessionKeys, EndSessions: g.endSessions, PublicURL: g.o.PublicURL,
		Authorize: g.authorizeKey, Artifact: http.HandlerFunc(artifact), Request: g.storedRequest, Loads: g.uiLoads,
		TraceURL: g.o.TraceURL})
}

// sessionIdentity is whose sessions s is, as the tenants bucket records their end.
func sessionIdentity(s webui.Session) string {
	if s.Operator {
		return protocol.OperatorSessions
	}
	return s.Tenant
}

// sessionKeys is what every request of a web session is checked against: the keys that act for
// its identity now, from the live view of the tenants bucket, and when its sessions were ended.
func (g *Gateway) sessionKeys(s webui.Session) ([]string, time.Time) {
	notBefore := g.tenants.SessionsNotBefore(sessionIdentity(s))
	if s.Operator {
		return []string{hex.EncodeToString(g.key[:])}, notBefore
	}
	return g.tenants.Digests(s.Tenant), notBefore
}

// endSessions voids s's identity's sessions issued until at: in this gateway at once, and in
// every gateway through the tenants bucket.
func (g *Gateway) endSessions(ctx context.Context, s webui.Session, at time.Time) error {
	id := sessionIdentity(s)
	if g.tenantsKV != nil {
		if err := tenant.EndSessions(ctx, g.tenantsKV, id, at); err != nil {
			return err
		}
	}
	g.tenants.SetSessionsNotBefore(id, at)
	return nil
}

// uiLoads is every tenant's load for the web view's tenants page, from the shared snapshot.
func (g *Gateway) uiLoads(ctx context.Context) (map[string]webui.Load, error) {
	load, err := g.snapshot(ctx)
	out := make(map[string]webui.Load, len(load))
	for t, l := range load {
		out[t] = webui.Load{Queued: l.Queued, Running: l.Running}
	}
	return out, err
}

// storedRequest is tenant's job's stored request, for the web view: read through tenant's
// client, so that the page of a job shows its own tenant's request only.
func (g *Gateway) storedRequest(ctx context.Context, tenant, id string) (runfleet.StoredRequest, error) {
	return g.as(tenant).Request(ctx, id)
}

// authorizeKey says who key is, as the API's keys do: the operator's key sees every tenant, a
// tenant's key its own.
func (g *Gateway) authorizeKey(key string) (webui.Session, bool) {
	c, ok := g.identify(key)
	switch {
	case !ok:
		return webui.Session{}, false
	case c.operator:
		return webui.Session{Operator: true, KeyDigest: tenant.HashKey(key)}, true
	}
	return webui.Session{Tenant: c.tenant, KeyDigest: tenant.HashKey(key)}, true
}

// Close ends what the gateway runs beside its requests: the web view's watches.
func (g *Gateway) Close() {
	if g.ui != nil {
		g.ui.Close()
	}
}

// withUI serves the web view at /ui/ beside the API; the view checks its own session cookie.
func (g *Gateway) withUI(api http.Handler) http.Handler {
	if g.ui == nil {
		return api
	}
	top := http.NewServeMux()
	top.Handle("/ui/", g.ui.Handler())
	top.Handle("/", api)
	return top
}
