package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/runfleet/runfleet/internal/webui"
)

// newUI makes the web view on the gateway's client and keys.
func (g *Gateway) newUI() (*webui.UI, error) {
	secret := sha256.Sum256([]byte("runfleet web view\x00" + g.o.APIKey))
	return webui.New(webui.Options{Client: g.client, NATS: g.nc, Secret: secret[:], Logger: g.log,
		Authorize: g.authorizeKey, Artifact: http.HandlerFunc(g.artifact), Request: g.storedRequest})
}

// storedRequest is a job's stored request and its tenant, for the web view.
func (g *Gateway) storedRequest(ctx context.Context, id string) (json.RawMessage, string, error) {
	r, err := g.client.Request(ctx, id)
	return r.Body, r.Tenant, err
}

// authorizeKey says who key is, as the API's keys do: the operator's key sees every tenant.
func (g *Gateway) authorizeKey(key string) (webui.Session, bool) {
	sum := sha256.Sum256([]byte(key))
	if key != "" && subtle.ConstantTimeCompare(sum[:], g.key[:]) == 1 {
		return webui.Session{Operator: true}, true
	}
	return webui.Session{}, false
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
