package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/tracing"
	"github.com/runfleet/runfleet/fleet/internal/webui"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

const usage = `usage: gateway [flags]

Serves runfleet's HTTP API for services that do not speak NATS: POST /v1/jobs, GET /v1/jobs/{id},
GET /v1/jobs/{id}/events (server-sent events), DELETE /v1/jobs/{id}, and dify-sandbox's
POST /v1/sandbox/run, GET /v1/sandbox/dependencies and GET /health, so that Dify's
CODE_EXECUTION_ENDPOINT can point at it, piston's GET /api/v2/runtimes and POST /api/v2/execute,
and judge0's GET /languages, POST /submissions, POST /submissions/batch and
GET /submissions/{token}. Every route but /health, /healthz and /readyz needs the
API key, sent as X-Api-Key or Authorization: Bearer.

Every flag also reads RUNFLEET_<NAME> from the environment (--api-key ↔ RUNFLEET_API_KEY).
Sizes: bytes, or k, m, g (KiB, MiB, GiB).

Flags:
`

type config struct {
	listen, prefix, queue, apiKey, dependencies string
	metricsListen                               string
	logger                                      func(io.Writer) *slog.Logger
	rootfs                                      string
	signingKey                                  string
	publicURL, traceURL                         string
	bodyTimeout, writeTimeout, signedURLTTL     time.Duration
	maxOutput                                   cli.ByteSize
	cancelOnDisconnect                          string
	nats                                        cli.NATS
	streamReplicas, maxWaiting                  int
	maxWait, timeout, grace                     time.Duration
	ui                                          bool
}

// flags is the gateway's flag set, whose --help prints on stdout.
func flags(stdout io.Writer) (*flag.FlagSet, *config) {
	c := &config{}
	fs := cli.NewFlagSet("gateway", usage, stdout)
	c.logger = cli.LogLevel(fs)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8194", "HTTP address (8194 is dify-sandbox's port)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "also serve /metrics and /v1/backlog on this address, without the API key (for Prometheus and KEDA); on --listen they need the operator's key")
	c.nats.Register(fs)
	fs.StringVar(&c.prefix, "prefix", job.DefaultPrefix, "subject and stream prefix of the fleet")
	fs.StringVar(&c.queue, "queue", job.DefaultQueue, "queue jobs go to (POST /v1/jobs?queue= overrides it)")
	fs.IntVar(&c.streamReplicas, "stream-replicas", 1, "JetStream replicas of the streams (3 on a 3-node cluster); an existing stream is raised, never lowered")
	fs.StringVar(&c.apiKey, "api-key", "", "the key clients send (required)")
	fs.DurationVar(&c.maxWait, "max-wait", gateway.DefaultMaxWait, "longest a waiting request (?wait=true, /v1/sandbox/run, events) is held")
	fs.IntVar(&c.maxWaiting, "max-waiting", gateway.DefaultMaxWaiting, "requests waiting for a settlement at once (?wait=true, /v1/sandbox/run); past it 503 with Retry-After, before anything is stored")
	fs.DurationVar(&c.timeout, "timeout", gateway.DefaultRunTimeout, "timeout_ms of /v1/sandbox/run jobs (dify-sandbox's WORKER_TIMEOUT)")
	c.maxOutput = gateway.DefaultMaxOutput
	fs.Var(&c.maxOutput, "max-output", "output_bytes of /v1/sandbox/run jobs (a size: 64k, 4m, 1MiB); at most the workers' maximum, 16MiB")
	fs.StringVar(&c.cancelOnDisconnect, "cancel-on-disconnect", "", "whether a waiting client that goes away cancels its job: true, false, or empty for each route's default (true for /v1/sandbox/run, false for ?wait=true)")
	fs.DurationVar(&c.bodyTimeout, "body-timeout", gateway.DefaultBodyTimeout, "longest a request body may take to arrive; past it 408")
	fs.DurationVar(&c.writeTimeout, "write-timeout", gateway.DefaultWriteTimeout, "longest one write of an answer (an event of a stream included) may take before the client is let go")
	fs.StringVar(&c.signingKey, "signing-key", "", "key of the signed events URLs a browser follows a job with (default: random at start, so such a URL works on this gateway only)")
	fs.DurationVar(&c.signedURLTTL, "signed-url-ttl", gateway.DefaultSignedURLTTL, "how long a signed events URL is valid")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "on SIGTERM, how long in-flight requests may finish")
	fs.BoolVar(&c.ui, "ui", true, "serve the web view at /ui/ (--ui=false turns it off)")
	fs.StringVar(&c.publicURL, "public-url", "", "the gateway's address as browsers reach it, behind a proxy (https://… makes the web view's cookies Secure; forms are accepted from its origin only)")
	fs.StringVar(&c.traceURL, "trace-url", "", "a trace viewer's page of a trace, {trace_id} where the id goes (http://jaeger:16686/trace/{trace_id}): a job's page in the web view links the trace its request carried; without it the id is shown as text")
	fs.StringVar(&c.rootfs, "rootfs", "/", "root file system of the workers' python3 profile (their --rootfs), whose Python packages /v1/sandbox/dependencies lists when no serving worker announces its own")
	fs.StringVar(&c.dependencies, "dependencies", "", "file listing the python3 profile's packages as `pip freeze` prints them, instead of those --rootfs holds")
	return fs, c
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := flags(stdout)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return err
	}
	if c.apiKey == "" {
		return gateway.ErrNoKey
	}
	if c.maxWaiting < 1 {
		return fmt.Errorf("--max-waiting %d: want at least 1", c.maxWaiting)
	}
	if c.maxOutput < 1 {
		return fmt.Errorf("--max-output %s: want at least 1 byte", c.maxOutput.String())
	}
	var cancelOnDisconnect *bool
	if c.cancelOnDisconnect != "" {
		v, err := strconv.ParseBool(c.cancelOnDisconnect)
		if err != nil {
			return fmt.Errorf("--cancel-on-disconnect %q: want true or false", c.cancelOnDisconnect)
		}
		cancelOnDisconnect = &v
	}
	if _, err := c.nats.Options(); err != nil {
		return err
	}
	var publicURL *url.URL
	if c.publicURL != "" {
		u, err := url.Parse(c.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: want http:// or https:// and a host", c.publicURL)
		}
		publicURL = u
	}
	if c.traceURL != "" {
		if err := webui.CheckTraceURL(c.traceURL); err != nil {
			return fmt.Errorf("--trace-url: %w", err)
		}
	}
	deps := map[string][]gateway.Dependency{}
	if c.dependencies == "" {
		var err error
		if deps["python3"], err = gateway.ReadDependencies(c.rootfs); err != nil {
			return fmt.Errorf("--rootfs: %w", err)
		}
	} else {
		f, err := os.Open(c.dependencies)
		if err != nil {
			return fmt.Errorf("--dependencies: %w", err)
		}
		deps["python3"], err = gateway.ParseDependencies(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--dependencies %s: %w", c.dependencies, err)
		}
	}
	log := c.logger(stderr)
	shutdown, err := tracing.Setup(ctx, getenv, "runfleet-gateway", cli.Version())
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("export traces", "err", err)
		}
	}()
	nc, err := cli.ConnectNATS(c.nats, "runfleet-gateway", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	startCtx, cancelStart := context.WithTimeout(ctx, 15*time.Second)
	defer cancelStart()
	// The tenants' keys and bounds follow the bucket until the gateway stops; New makes the
	// streams first, whose errors say more than the bucket's.
	tenants := &tenant.Policies{}
	g, err := gateway.New(startCtx, nc, gateway.Options{Tenants: tenants, APIKey: c.apiKey, Prefix: c.prefix, Queue: c.queue,
		Streams: protocol.StreamOptions{Replicas: c.streamReplicas}, MaxWait: c.maxWait, MaxWaiting: c.maxWaiting, RunTimeout: c.timeout, MaxOutput: int64(c.maxOutput),
		CancelOnDisconnect: cancelOnDisconnect,
		BodyTimeout:        c.bodyTimeout, WriteTimeout: c.writeTimeout, SigningKey: []byte(c.signingKey), SignedURLTTL: c.signedURLTTL,
		Dependencies: deps, Logger: log, DisableUI: !c.ui, PublicURL: publicURL, TraceURL: c.traceURL})
	if err != nil {
		return err
	}
	defer g.Close()
	subjects, err := job.NewSubjects(c.prefix)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	kv, err := tenant.EnsureBucket(startCtx, js, subjects, c.streamReplicas)
	if err != nil {
		return err
	}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	var follow sync.WaitGroup
	follow.Go(func() { _ = tenants.Follow(followCtx, kv, log) })
	defer follow.Wait()
	defer stopFollow()
	select {
	case <-tenants.Loaded():
	case <-startCtx.Done():
		return fmt.Errorf("read bucket %s: %w", subjects.TenantsBucket(), startCtx.Err())
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.listen, err)
	}
	// Requests live on their own context, which shutdown ends only after the grace period.
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return reqCtx }}
	var wg sync.WaitGroup
	serveErr := make(chan error, 2)
	wg.Go(func() { serveErr <- srv.Serve(ln) })
	// /metrics alone on a listener of its own, so that a scraper needs no key that can submit code.
	var msrv *http.Server
	closeMetrics := func() {
		if msrv != nil {
			_ = msrv.Close()
		}
	}
	if c.metricsListen != "" {
		mln, err := net.Listen("tcp", c.metricsListen)
		if err != nil {
			_ = srv.Close()
			wg.Wait()
			return fmt.Errorf("--metrics-listen %s: %w", c.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", g.Metrics().Handler())
		mux.Handle("GET /v1/backlog", g.Backlog())
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		wg.Go(func() {
			if err := msrv.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		})
		log.Info("metrics served without the key", "metrics_listen", mln.Addr().String())
	}
	log.Info("gateway started", "version", cli.Version(), "listen", ln.Addr().String(), "nats_url", cli.RedactURL(c.nats.URL),
		"prefix", c.prefix, "queue", c.queue, "max_wait", c.maxWait.String())
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		_ = srv.Close()
		closeMetrics()
		wg.Wait()
		return fmt.Errorf("serve: %w", err)
	}
	g.Drain()
	log.Info("signal: finishing in-flight requests", "grace", c.grace.String(), "waiting", g.Metrics().Waiting())
	shutCtx, cancelShut := context.WithTimeout(context.Background(), c.grace)
	err = srv.Shutdown(shutCtx)
	cancelShut()
	if err != nil {
		// Waiting requests answer with their job's id and end; the jobs go on.
		log.Warn("grace period over: releasing waiting requests", "waiting", g.Metrics().Waiting())
		endRequests()
		lastCtx, cancelLast := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(lastCtx); err != nil {
			srv.Close()
		}
		cancelLast()
	}
	closeMetrics()
	wg.Wait()
	log.Info("gateway stopped")
	return nil
}
