package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/backlog"
	"github.com/runfleet/runfleet/fleet/internal/pydist"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/webui"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Defaults of [Options].
const (
	DefaultMaxWait    = 5 * time.Minute
	DefaultRunTimeout = 15 * time.Second // dify-sandbox's WORKER_TIMEOUT
	DefaultMaxOutput  = 1 << 20          // output_bytes of /v1/sandbox/run jobs
)

// publishTimeout bounds one publish to JetStream; past it the fleet counts as unreachable.
const publishTimeout = 10 * time.Second

// Options configure a [Gateway]. Zero fields take the documented defaults.
type Options struct {
	APIKey     string                 // required
	Prefix     string                 // default job.DefaultPrefix
	Queue      string                 // default job.DefaultQueue
	Streams    protocol.StreamOptions // used only when a stream is missing
	MaxWait    time.Duration          // longest a request waits for a settlement; default DefaultMaxWait
	MaxWaiting int                    // requests waiting at once (?wait=true, /v1/sandbox/run); default DefaultMaxWaiting
	RunTimeout time.Duration          // timeout_ms of /v1/sandbox/run jobs; default DefaultRunTimeout
	MaxOutput  int64                  // output_bytes of /v1/sandbox/run jobs; default DefaultMaxOutput
	// CancelOnDisconnect says whether a waiting client that goes away cancels its job; nil is each
	// route's default: yes for /v1/sandbox/run, no for ?wait=true (which may ask with
	// ?cancel_on_disconnect=).
	CancelOnDisconnect *bool
	BodyTimeout        time.Duration           // longest a request body may take to arrive; default DefaultBodyTimeout
	WriteTimeout       time.Duration           // longest one write of an answer may take; default DefaultWriteTimeout
	SigningKey         []byte                  // key of signed events URLs; default: random, this process's own
	SignedURLTTL       time.Duration           // how long a signed events URL is valid; default DefaultSignedURLTTL
	Dependencies       map[string][]Dependency // per language, what /v1/sandbox/dependencies lists
	Logger             *slog.Logger            // default: discard
	DisableUI          bool                    // serve no web view at /ui/
	// Tenants is the live view of the tenants bucket (tenant.Policies, which the caller follows):
	// the keys that act for a tenant, each tenant's max_queued, and the web view's session secret
	// and ended sessions (New makes the bucket and the secret when they are missing). Nil knows no
	// tenant: only the operator's key is accepted, nothing is bounded, and web sessions are this
	// process's own.
	Tenants *tenant.Policies
	// PublicURL is the gateway's address as browsers reach it, behind a proxy: an https one makes
	// the web view's cookies Secure, and its origin is the one a form may be posted from. Nil: as
	// each request arrives.
	PublicURL *url.URL
	// TraceURL is a trace viewer's page of a trace, {trace_id} where the id goes: a job's page of
	// the web view links the trace its request carried there. Empty shows the trace id as text.
	TraceURL string
}

// Dependency is a package a profile ships, as dify-sandbox lists it.
type Dependency = pydist.Package

// Gateway serves the HTTP API over one NATS connection. It holds no job state.
type Gateway struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	client     *runfleet.Client
	inspector  *runfleet.Inspector // stores jobs (checked once, by reserve) and runs redrives
	subjects   job.Subjects
	o          Options
	policy     job.Policy
	key        [sha256.Size]byte
	signingKey []byte // of signed events URLs
	log        *slog.Logger
	metrics    *Metrics
	draining   atomic.Bool
	admission  admission
	tenants    *tenant.Policies
	tenantsKV  jetstream.KeyValue // nil without Options.Tenants
	backlogs   backlogs
	served     served
	usages     usages
	ui         *webui.UI // nil when disabled
	backlog    *backlog.Reader
}

// ErrNoKey is returned by [New] without an API key: the gateway never serves without one.
var ErrNoKey = errors.New("an API key is required (--api-key or RUNFLEET_API_KEY)")

// New returns a gateway publishing on nc, and creates the fleet's streams when they are missing.
func New(ctx context.Context, nc *nats.Conn, o Options) (*Gateway, error) {
	if o.APIKey == "" {
		return nil, ErrNoKey
	}
	o.Queue = cmp.Or(o.Queue, job.DefaultQueue)
	if !job.ValidQueue(o.Queue) {
		return nil, fmt.Errorf("queue %q: not a valid queue name", o.Queue)
	}
	o.MaxWait = cmp.Or(o.MaxWait, DefaultMaxWait)
	o.RunTimeout = cmp.Or(o.RunTimeout, DefaultRunTimeout)
	o.MaxWaiting = cmp.Or(o.MaxWaiting, DefaultMaxWaiting)
	o.MaxOutput = cmp.Or(o.MaxOutput, DefaultMaxOutput)
	o.BodyTimeout = cmp.Or(o.BodyTimeout, DefaultBodyTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	o.SignedURLTTL = cmp.Or(o.SignedURLTTL, DefaultSignedURLTTL)
	signingKey := o.SigningKey
	if len(signingKey) == 0 {
		signingKey = make([]byte, 32)
		rand.Read(signingKey)
	}
	// The gateway checks max_queued once, itself (reserve), against its shared snapshot.
	client, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: o.Prefix, SkipQueueCheck: true})
	if err != nil {
		return nil, err
	}
	inspector, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{Prefix: o.Prefix})
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := inspector.EnsureStreams(ctx, o.Streams); err != nil {
		return nil, err
	}
	g := &Gateway{nc: nc, js: js, client: client, inspector: inspector, subjects: client.Subjects(), o: o,
		policy: job.ProtocolPolicy(), key: sha256.Sum256([]byte(o.APIKey)),
		log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), metrics: NewMetrics(), tenants: o.Tenants}
	if g.tenants == nil {
		g.tenants = &tenant.Policies{}
	} else if !o.DisableUI {
		if g.tenantsKV, err = tenant.EnsureBucket(ctx, js, g.subjects, o.Streams.Replicas); err != nil {
			return nil, err
		}
	}
	g.newBacklog()
	g.admission.max = int64(o.MaxWaiting)
	g.signingKey = signingKey
	if !o.DisableUI {
		if g.ui, err = g.newUI(ctx); err != nil {
			return nil, fmt.Errorf("web view: %w", err)
		}
	}
	return g, nil
}

// Metrics are the gateway's collectors, served at /metrics.
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// Drain makes /readyz fail, so that a load balancer stops sending requests before shutdown.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Handler returns the gateway's routes behind authentication and metrics.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", g.postJob)
	mux.HandleFunc("GET /v1/jobs", g.listJobs)
	mux.HandleFunc("POST /v1/jobs/{id}/redrive", g.redrive)
	mux.HandleFunc("POST /v1/redrives", g.startRedrive)
	mux.HandleFunc("GET /v1/redrives/{id}", g.redriveRun)
	mux.HandleFunc("DELETE /v1/redrives/{id}", g.redriveRun)
	mux.HandleFunc("GET /v1/jobs/{id}", g.jobOrInspect)
	mux.HandleFunc("GET /v1/jobs/{id}/events", g.events)
	mux.HandleFunc("POST /v1/jobs/{id}/events-url", g.eventsURL)
	mux.HandleFunc("DELETE /v1/jobs/{id}", g.cancel)
	mux.HandleFunc("GET /v1/jobs/{id}/artifacts/{path...}", g.artifact)
	mux.HandleFunc("POST /v1/sandbox/run", g.sandboxRun)
	mux.HandleFunc("GET /v1/sandbox/dependencies", g.sandboxDependencies)
	mux.HandleFunc("GET /api/v2/runtimes", g.pistonRuntimes)
	mux.HandleFunc("POST /api/v2/execute", g.pistonExecute)
	mux.HandleFunc("GET /languages", g.judge0Languages)
	mux.HandleFunc("POST /submissions", g.judge0Submit)
	mux.HandleFunc("POST /submissions/batch", g.judge0Batch)
	mux.HandleFunc("GET /submissions/{id}", g.judge0Get)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", g.ready)
	mux.Handle("GET /metrics", g.operatorOnly(g.metrics.Handler()))
	mux.Handle("GET /v1/backlog", g.operatorOnly(g.Backlog()))
	return g.metrics.instrument(g.log, g.o.WriteTimeout, g.withUI(g.authenticate(mux)))
}

// public are the routes that answer without the key: probes that tell nothing about jobs.
var public = map[string]bool{"/healthz": true, "/readyz": true, "/health": true}

func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if c, ok := g.identify(requestKey(r)); ok {
			setCaller(r, c)
			next.ServeHTTP(w, r)
			return
		}
		if tenant, ok := g.signedEvents(r); ok {
			// The gateway signed the URL of one job of tenant for a caller that could see it:
			// the request acts for that tenant, whose job the URL names.
			setCaller(r, caller{tenant: tenant})
			next.ServeHTTP(w, r)
			return
		}
		routeOf(r, next)
		w.Header().Set("WWW-Authenticate", `Bearer realm="runfleet"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "send the API key as X-Api-Key or Authorization: Bearer")
	})
}

// requestKey is the API key r sends, as X-Api-Key or Authorization: Bearer.
func requestKey(r *http.Request) string {
	key := r.Header.Get("X-Api-Key")
	if auth := r.Header.Get("Authorization"); key == "" && len(auth) > 7 && strings.EqualFold(auth[:7], "Bearer ") {
		key = auth[7:]
	}
	return key
}

// identify says who key is: the operator's key, or one a tenant's policy lists (read from the
// live view, so that a key added or removed applies without a restart). It compares digests, so
// that the comparison takes the same time whatever the length and content of the key sent.
func (g *Gateway) identify(key string) (caller, bool) {
	if key == "" {
		return caller{}, false
	}
	sum := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(sum[:], g.key[:]) == 1 {
		return caller{tenant: job.DefaultTenant, operator: true, anyTenant: true}, true
	}
	if t, ok := g.tenants.ForKey(key); ok {
		return caller{tenant: t}, true
	}
	return caller{}, false
}

func (g *Gateway) ready(w http.ResponseWriter, _ *http.Request) {
	switch {
	case g.draining.Load():
		writeError(w, http.StatusServiceUnavailable, "draining", "shutting down")
	case !g.nc.IsConnected():
		writeError(w, http.StatusServiceUnavailable, "unavailable", "NATS disconnected")
	default:
		io.WriteString(w, "ok\n")
	}
}

// errorBody is the body of every native error: a short code and what a person needs to fix it.
type errorBody struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

func writeError(w http.ResponseWriter, code int, reason, detail string) {
	writeJSON(w, code, errorBody{Reason: reason, Detail: detail})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"reason":"internal","detail":"encode response"}`)
	}
	writeRaw(w, code, b)
}

func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
