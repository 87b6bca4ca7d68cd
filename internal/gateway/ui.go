package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"

	"github.com/runfleet/runfleet/internal/webui"
)

// newUI makes the web view on the gateway's client and keys.
func (g *Gateway) newUI() (*webui.UI, error) {
	secret := sha256.Sum256([]byte("runfleet web view\x00" + g.o.APIKey))
	// The view checks a session's access to a job before it serves the job's artifact.
	artifact := func(w http.ResponseWriter, r *http.Request) { g.artifact(w, withCaller(r, caller{anyTenant: true})) }
	return webui.New(webui.Options{Client: g.client, NATS: g.nc, Secret: secret[:], Logger: g.log,
		Authorize: g.authorizeKey, Artifact: http.HandlerFunc(artifact), Request: g.storedRequest, Loads: g.uiLoads})
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

// storedRequest is a job's stored request and its tenant, for the web view.
func (g *Gateway) storedRequest(ctx context.Context, id string) (json.RawMessage, string, error) {
	r, err := g.client.Request(ctx, id)
	return r.Body, r.Tenant, err
}

// authorizeKey says who key is, as the API's keys do: the operator's key sees every tenant, a
// tenant's key its own.
func (g *Gateway) authorizeKey(key string) (webui.Session, bool) {
	c, ok := g.identify(key)
	switch {
	case !ok:
		return webui.Session{}, false
	case c.operator:
		return webui.Session{Operator: true}, true
	}
	return webui.Session{Tenant: c.tenant}, true
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
