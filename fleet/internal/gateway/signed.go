package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// DefaultSignedURLTTL is how long a signed events URL lets a browser in.
const DefaultSignedURLTTL = 5 * time.Minute

// A browser's EventSource cannot send the API key, so a holder of the key asks for a signed URL
// of one job's events (POST /v1/jobs/{id}/events-url) and gives it to the browser: the URL
// carries the job's tenant, its expiry and an HMAC-SHA256 of the tenant, the job id and the
// expiry under the gateway's signing key, and opens that route of that tenant's job only, until
// it expires.

// signature is the hex HMAC of tenant's job id's events route until expires (Unix seconds).
func (g *Gateway) signature(tenant, id string, expires int64) string {
	mac := hmac.New(sha256.New, g.signingKey)
	mac.Write([]byte("events\n" + tenant + "\n" + id + "\n" + strconv.FormatInt(expires, 10)))
	return hex.EncodeToString(mac.Sum(nil))
}

// signedEvents reports whether r is a GET of a job's events whose URL the gateway signed and
// that has not expired, and the job's tenant, for which r then acts.
func (g *Gateway) signedEvents(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/jobs/")
	if !ok || r.Method != http.MethodGet {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/events")
	if !ok || strings.Contains(id, "/") {
		return "", false
	}
	q := r.URL.Query()
	tenant := q.Get("tenant")
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > expires || !job.ValidTenant(tenant) {
		return "", false
	}
	sig, err := hex.DecodeString(q.Get("signature"))
	want, _ := hex.DecodeString(g.signature(tenant, id, expires))
	return tenant, err == nil && hmac.Equal(sig, want)
}

// signedURL is the answer of POST /v1/jobs/{id}/events-url.
type signedURL struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// eventsURL answers a URL of job id's events that a browser opens without the key.
func (g *Gateway) eventsURL(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	c, ok := g.jobClient(w, r, id)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	switch _, err := c.Lookup(ctx, id); {
	case errors.Is(err, runfleet.ErrNotFound):
		b := lookupFailure(id, err)
		writeError(w, http.StatusNotFound, b.Reason, b.Detail)
		return
	case err != nil:
		g.log.Warn("look up a job", "job_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the job; retry later")
		return
	}
	expires := time.Now().Add(g.o.SignedURLTTL).Truncate(time.Second)
	q := url.Values{"tenant": {c.Tenant()}, "expires": {strconv.FormatInt(expires.Unix(), 10)},
		"signature": {g.signature(c.Tenant(), id, expires.Unix())}}
	writeJSON(w, http.StatusOK, signedURL{URL: "/v1/jobs/" + id + "/events?" + q.Encode(), ExpiresAt: expires.UTC()})
}
