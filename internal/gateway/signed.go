package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultSignedURLTTL is how long a signed events URL lets a browser in.
const DefaultSignedURLTTL = 5 * time.Minute

// A browser's EventSource cannot send the API key, so a holder of the key asks for a signed URL
// of one job's events (POST /v1/jobs/{id}/events-url) and gives it to the browser: the URL
// carries its expiry and an HMAC-SHA256 of the job id and expiry under the gateway's signing
// key, and opens that route of that job only, until it expires.

// signature is the hex HMAC of job id's events route until expires (Unix seconds).
func (g *Gateway) signature(id string, expires int64) string {
	mac := hmac.New(sha256.New, g.signingKey)
	mac.Write([]byte("events\n" + id + "\n" + strconv.FormatInt(expires, 10)))
	return hex.EncodeToString(mac.Sum(nil))
}

// signedEvents reports whether r is a GET of a job's events whose URL the gateway signed and
// that has not expired.
func (g *Gateway) signedEvents(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/jobs/")
	if !ok || r.Method != http.MethodGet {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/events")
	if !ok || strings.Contains(id, "/") {
		return false
	}
	q := r.URL.Query()
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > expires {
		return false
	}
	sig, err := hex.DecodeString(q.Get("signature"))
	want, _ := hex.DecodeString(g.signature(id, expires))
	return err == nil && hmac.Equal(sig, want)
}

// signedURL is the answer of POST /v1/jobs/{id}/events-url.
type signedURL struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// eventsURL answers a URL of job id's events that a browser opens without the key.
func (g *Gateway) eventsURL(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok || !g.owned(w, r, id) {
		return
	}
	expires := time.Now().Add(g.o.SignedURLTTL).Truncate(time.Second)
	q := url.Values{"expires": {strconv.FormatInt(expires.Unix(), 10)}, "signature": {g.signature(id, expires.Unix())}}
	writeJSON(w, http.StatusOK, signedURL{URL: "/v1/jobs/" + id + "/events?" + q.Encode(), ExpiresAt: expires.UTC()})
}
