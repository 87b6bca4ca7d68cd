package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/internal/devstack"
	"github.com/runfleet/runfleet/internal/fairshare"
	"github.com/runfleet/runfleet/internal/jobindex"
	"github.com/runfleet/runfleet/internal/lease"
	"github.com/runfleet/runfleet/internal/metrics"
	"github.com/runfleet/runfleet/internal/pool"
	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/providers/docker"
	"github.com/runfleet/runfleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/internal/redisurl"
	"github.com/runfleet/runfleet/internal/redrive"
	"github.com/runfleet/runfleet/internal/runner"
	"github.com/runfleet/runfleet/internal/sandbox"
	"github.com/runfleet/runfleet/internal/supervise"
	"github.com/runfleet/runfleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
)

// version is set by the build.
var version = "dev"

type config struct {
	redisURL, prefix, queues, provider, profiles, listen, id string
	nats                                                     cli.NATS
	concurrency, warm, warmRefills                           int
	warmMaxAge                                               time.Duration
	leaseTTL, grace, retention                               time.Duration
	dev, rebuildIndex                                        bool
	rootfs, image, dispatchLog                               string
	cpus                                                     float64
	maxTimeout                                               time.Duration
	maxPages                                                 int64
	maxFailures, streamReplicas                              int
	hook                                                     func() func(phase string)
	artifactsMaxBytes, jobsMaxBytes                          cli.ByteSize
}

func flags(stderr io.Writer) (*flag.FlagSet, *config) {
	c := &config{}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	c.nats.Register(fs)
	fs.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis for leases and dispatch records")
	fs.StringVar(&c.prefix, "prefix", job.DefaultPrefix, "subject, stream and key prefix")
	fs.StringVar(&c.queues, "queues", job.DefaultQueue, "queues to serve, comma separated")
	fs.IntVar(&c.concurrency, "concurrency", runtime.NumCPU(), "sandboxes running at once")
	fs.IntVar(&c.warm, "warm", -1, "sandboxes per profile kept created and waiting, never used before; 0 disables (default --concurrency)")
	fs.IntVar(&c.warmRefills, "warm-refills", pool.DefaultRefills, "waiting sandboxes created at once, across profiles")
	fs.DurationVar(&c.warmMaxAge, "warm-max-age", pool.DefaultMaxAge, "longest a sandbox waits before it is replaced")
	fs.StringVar(&c.provider, "provider", "namespace", "sandbox provider: docker or namespace")
	fs.StringVar(&c.profiles, "profiles", "", "JSON file of extra language profiles (built in: python3, nodejs)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", lease.DefaultTTL, "how long a claim lives without a heartbeat")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "on SIGTERM, how long running jobs may finish")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9464", "HTTP address of /metrics, /healthz, /readyz")
	fs.StringVar(&c.id, "id", host+"-"+uuid.NewString()[:8], "worker identity, shown in settlements")
	fs.BoolVar(&c.dev, "dev", false, "start an embedded NATS JetStream and a child redis-server (not durable)")
	fs.StringVar(&c.rootfs, "rootfs", "", "namespace provider: root file system of the built-in profiles (default: the host's /usr)")
	fs.StringVar(&c.image, "image", "runfleet-sandbox:latest", "docker provider: image of the built-in profiles")
	fs.Float64Var(&c.cpus, "cpus", 1, "CPU quota of each sandbox, in cores")
	fs.DurationVar(&c.maxTimeout, "max-timeout", 5*time.Minute, "largest timeout_ms a job may ask for")
	fs.Int64Var(&c.maxPages, "max-pages", 0, "largest max_pages a job may ask for or get by default (default: what a job of --max-timeout needs)")
	fs.IntVar(&c.maxFailures, "max-failures", 5, "pre-dispatch failures before a job settles error")
	fs.IntVar(&c.streamReplicas, "stream-replicas", 1, "JetStream replicas of the fleet's streams (3 on a 3-node cluster); an existing stream is raised, never lowered")
	fs.StringVar(&c.dispatchLog, "dispatch-log", "", "file the provider appends one line to per dispatch (audits, tests)")
	c.artifactsMaxBytes = runfleet.DefaultArtifactsMaxBytes
	fs.Var(&c.artifactsMaxBytes, "artifacts-max-bytes", "bound of the artifacts bucket (KiB, MiB, GiB, TiB); a put past it fails, nothing stored is dropped")
	fs.BoolVar(&c.rebuildIndex, "rebuild-index", false, "add the list row of every settlement the results stream keeps to the job index (after Redis lost data), print the counts and exit")
	fs.DurationVar(&c.retention, "retention", runfleet.DefaultRetention, "how long a job's record and its stored request are kept (lookup, dedup, redrive)")
	c.jobsMaxBytes = runfleet.DefaultJobsMaxBytes
	fs.Var(&c.jobsMaxBytes, "jobs-max-bytes", "bound of the jobs stream, the kept requests (KiB, MiB, GiB, TiB); a publish past it is refused, nothing stored is dropped")
	c.hook = faultHook(fs)
	return fs, c
}

// minRetention is the jobs stream's duplicate window: JetStream refuses a MaxAge below it.
const minRetention = 2 * time.Minute

// validate checks what can be checked before connecting to anything, so that a wrong flag is
// reported as itself and not as the failure it would cause later.
func (c *config) validate() error {
	switch {
	case c.provider != "namespace" && c.provider != "docker":
		return fmt.Errorf("--provider %q: want docker or namespace", c.provider)
	case c.concurrency < 1:
		return fmt.Errorf("--concurrency %d: want at least 1", c.concurrency)
	case c.leaseTTL < time.Second:
		return fmt.Errorf("--lease-ttl %v: want at least 1s", c.leaseTTL)
	case c.maxTimeout < job.DefaultPolicy().Default.Timeout:
		return fmt.Errorf("--max-timeout %v: want at least the default timeout, %v", c.maxTimeout, job.DefaultPolicy().Default.Timeout)
	case c.maxPages < 0 || c.maxPages > 0 && c.maxPages < job.DefaultPolicy().Default.MaxPages:
		return fmt.Errorf("--max-pages %d: want 0 (derived from --max-timeout) or at least the default max_pages, %d", c.maxPages, job.DefaultPolicy().Default.MaxPages)
	case c.cpus < 0:
		return fmt.Errorf("--cpus %v: want 0 (no quota) or more", c.cpus)
	case c.warm < -1:
		return fmt.Errorf("--warm %d: want 0 (no pool) or more", c.warm)
	case c.warmRefills < 1:
		return fmt.Errorf("--warm-refills %d: want at least 1", c.warmRefills)
	case c.warmMaxAge <= 0:
		return fmt.Errorf("--warm-max-age %v: want a positive duration", c.warmMaxAge)
	case c.artifactsMaxBytes <= 0:
		return fmt.Errorf("--artifacts-max-bytes %v: want a positive size", &c.artifactsMaxBytes)
	case c.jobsMaxBytes <= 0:
		return fmt.Errorf("--jobs-max-bytes %v: want a positive size", &c.jobsMaxBytes)
	case c.retention < minRetention:
		return fmt.Errorf("--retention %v: want at least %v, the jobs stream's duplicate window", c.retention, minRetention)
	}
	if c.warm == -1 {
		c.warm = c.concurrency
	}
	if _, err := job.NewSubjects(c.prefix); err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	if _, err := c.nats.Options(); err != nil {
		return err
	}
	for _, q := range strings.Split(c.queues, ",") {
		if !job.ValidQueue(q) {
			return fmt.Errorf("--queues: %q is not a valid queue name", q)
		}
	}
	if _, err := redisurl.Parse(c.redisURL); err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	return nil
}

// policy is what the worker accepts of a job. Unless --max-pages says otherwise, its page cap
// holds a job of the longest timeout it accepts printing all along (job.PagesNeeded), so that a
// raised --max-timeout never turns chatty output into page_limit.
func (c *config) policy() job.Policy {
	p := job.DefaultPolicy()
	p.Max.Timeout = c.maxTimeout
	p.Max.MaxPages = cmp.Or(c.maxPages, max(p.Max.MaxPages, job.PagesNeeded(c.maxTimeout, p.Max.OutputBytes, p.Default.PageBytes)))
	return p
}

func run(sigs <-chan os.Signal, args []string, getenv func(string) string, stderr io.Writer) error {
	fs, c := flags(stderr)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	// Every line carries the worker's identity once: the runner adds only job keys.
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("worker", c.id)
	redis.SetLogger(redisLog{log})
	ctx, stopAll := context.WithCancel(context.Background())
	defer stopAll()

	if c.dev {
		stack, err := devstack.Start(ctx, strings.Split(c.nats.URL, ",")[0])
		if err != nil {
			return err
		}
		defer stack.Stop()
		c.nats.URL, c.redisURL = stack.NATSURL, stack.RedisURL
		log.Warn("dev mode: embedded NATS JetStream and a child redis-server; NOT DURABLE, jobs and results are lost on exit",
			"nats_url", cli.RedactURL(c.nats.URL), "redis_url", redisurl.Redact(c.redisURL))
		fmt.Fprintf(stderr, "runfleet dev stack: NATS %s, Redis %s (not durable)\n", c.nats.URL, c.redisURL)
	}
	subjects, err := job.NewSubjects(c.prefix)
	if err != nil {
		return err
	}
	queues := strings.Split(c.queues, ",")
	nc, err := cli.ConnectNATS(c.nats, "runfleet-worker "+c.id, log)
	if err != nil {
		return err
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	startCtx, cancelStart := context.WithTimeout(ctx, 15*time.Second)
	defer cancelStart()
	if err := runfleet.EnsureStreams(startCtx, js, subjects, runfleet.StreamOptions{Replicas: c.streamReplicas,
		ArtifactsMaxBytes: int64(c.artifactsMaxBytes), Retention: c.retention, JobsMaxBytes: int64(c.jobsMaxBytes)}); err != nil {
		return err
	}
	ru, err := redisurl.Parse(c.redisURL)
	if err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	rdb := ru.Open()
	defer rdb.Close()
	if err := rdb.Ping(startCtx).Err(); err != nil {
		return fmt.Errorf("redis %s unreachable: %w", ru.Redacted(), err)
	}
	if c.rebuildIndex {
		return rebuildIndex(ctx, js, subjects, rdb, c, stderr)
	}
	replicas := replicasToWait(startCtx, log, rdb, ru.Kind == redisurl.Sentinel)
	leases := lease.NewStore(rdb, lease.Options{Prefix: c.prefix, TTL: c.leaseTTL, Replicas: replicas, RecordTTL: c.retention})
	if err := leases.Init(startCtx); err != nil {
		return err
	}

	dlog := sandbox.DispatchLog{Path: c.dispatchLog}
	reap := func(context.Context) {}
	var removalsPending func() int
	var provider sandbox.Provider
	var profiles profile.Set
	switch c.provider {
	case "namespace":
		o := namespace.Options{CgroupName: c.prefix, DispatchLog: dlog}
		if len(supervisorBin) > 0 {
			if o.Supervisor, err = supervise.PrivateCopy(bytes.NewReader(supervisorBin), supervise.DefaultDir); err != nil {
				return fmt.Errorf("--provider namespace: supervisor: %w", err)
			}
		}
		p, err := namespace.New(o)
		if err != nil {
			return fmt.Errorf("--provider namespace: %w", err)
		}
		defer p.Close()
		if p.Reaped > 0 {
			log.Warn("removed cgroups left by dead workers", "count", p.Reaped)
		}
		provider, profiles = p, profile.Builtin(c.rootfs, "")
		reap = func(ctx context.Context) {
			// Sandboxes whose Destroy failed: their cgroups, mount points and uids.
			if _, err := p.Reap(ctx); err != nil {
				log.Warn("reap sandboxes", "err", err)
			}
		}
	case "docker":
		// No container outlives its longest wait in the pool and the largest timeout: each carries
		// that deadline, which every worker's reaper honours.
		o := docker.Options{Fleet: c.prefix, Worker: c.id, DispatchLog: dlog, Logger: log,
			Lifetime: c.warmMaxAge + c.maxTimeout + time.Minute}
		if len(supervisorBin) > 0 {
			if o.InitBinary, err = supervise.PrivateCopy(bytes.NewReader(supervisorBin), supervise.DefaultDir); err != nil {
				return fmt.Errorf("--provider docker: container init: %w", err)
			}
		}
		p, err := docker.New(startCtx, o)
		if err != nil {
			return fmt.Errorf("--provider docker: %w", err)
		}
		defer p.Close()
		provider, profiles, removalsPending = p, profile.Builtin("", c.image), p.PendingRemovals
		if profiles, err = p.Resolve(startCtx, profiles); err != nil {
			return fmt.Errorf("--provider docker: %w", err)
		}
		reap = func(ctx context.Context) {
			if _, err := p.Reap(ctx); err != nil {
				log.Warn("reap containers", "err", err)
			}
		}
		reap(startCtx)
	default:
		return fmt.Errorf("--provider %q: want docker or namespace", c.provider)
	}
	if c.profiles != "" {
		if profiles, err = profile.Load(c.profiles, profiles); err != nil {
			return err
		}
	}
	if err := runner.SelfCheck(startCtx, provider, profiles); err != nil {
		return err
	}

	tenantsKV, err := tenant.EnsureBucket(startCtx, js, subjects, c.streamReplicas)
	if err != nil {
		return err
	}
	var tenants tenant.Policies
	policy := c.policy()
	m := metrics.New(c.concurrency, &tenants)
	if removalsPending != nil {
		m.RemovalsPending(removalsPending)
	}
	sopts := runner.SandboxOptions{CPUs: c.cpus}
	var shapes []sandbox.Shape
	for _, name := range profiles.Names() {
		// A waiting sandbox holds the default limits; its job's own replace them when it is taken.
		d := policy.Default
		shapes = append(shapes, sopts.Shape(profiles[name], sandbox.Limits{Timeout: d.Timeout, MemoryBytes: d.MemoryBytes, Pids: d.Pids}))
	}
	warm := pool.New(provider, shapes, pool.Options{Size: c.warm, MaxAge: c.warmMaxAge, Refills: c.warmRefills, Logger: log, Observer: m})
	index := jobindex.New(rdb, jobindex.Options{Prefix: c.prefix, Retention: c.retention})
	client, err := runfleet.NewClient(startCtx, nil, runfleet.Options{Prefix: c.prefix, JetStream: js})
	if err != nil {
		return err
	}
	redrives := redrive.New(redrive.ClientFleet{Client: client}, index, rdb, redrive.Options{Prefix: c.prefix, Logger: log,
		Worker: c.id, HoldTTL: c.leaseTTL})
	r := runner.New(nc, js, subjects, leases, provider, runner.Options{
		Worker: c.id, Queues: queues, Concurrency: c.concurrency, Policy: policy, Profiles: profiles,
		MaxFailures: c.maxFailures, Sandbox: sopts, Sandboxes: warm,
		Logger: log, Observer: m, Hook: c.hook(), Index: index,
		Tenants: &tenants, Running: fairshare.NewRunning(rdb, c.prefix, c.id, c.leaseTTL),
	})

	claimCtx, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()
	runCtx, killRunning := context.WithCancelCause(ctx)
	defer killRunning(nil)
	var draining atomic.Bool
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.listen, err)
	}
	srv := &http.Server{Handler: m.Handler(map[string]metrics.Check{
		"nats": func(context.Context) error {
			if !nc.IsConnected() {
				return errors.New("disconnected")
			}
			return nil
		},
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		"provider": func(ctx context.Context) error {
			if p, ok := provider.(interface{ Ready(context.Context) error }); ok {
				return p.Ready(ctx)
			}
			return nil
		},
		"draining": func(context.Context) error {
			if draining.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
		"consuming": func(context.Context) error {
			if !r.Consuming() {
				return errors.New("not consuming its queues")
			}
			return nil
		},
	}), ReadHeaderTimeout: 5 * time.Second}
	var bg sync.WaitGroup
	// The pool ends with ctx, once Serve returned: every waiting sandbox is destroyed before run
	// returns and the provider closes.
	bg.Go(func() { warm.Run(ctx) })
	bg.Go(func() { _ = tenants.Follow(ctx, tenantsKV, log) })
	bg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http", "err", err)
		}
	})
	bg.Go(func() { heartbeats(claimCtx, nc, subjects, c, provider.Name(), profiles, r, warm) })
	bg.Go(func() { measureJobsStream(ctx, js, subjects, m, log) })
	bg.Go(func() {
		if err := index.Serve(ctx, nc, subjects, log); err != nil {
			log.Error("job index", "err", err)
		}
	})
	bg.Go(func() {
		if err := redrives.Serve(ctx, nc, subjects); err != nil {
			log.Error("redrive service", "err", err)
		}
	})
	bg.Go(func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				reap(ctx)
			}
		}
	})
	bg.Go(func() {
		select {
		case sig := <-sigs:
			log.Info("signal: stop claiming, let running jobs finish", "signal", sig.String(), "grace", c.grace.String(), "running", r.Running())
			draining.Store(true)
			stopClaiming()
		case <-ctx.Done():
			return
		}
		select {
		case sig := <-sigs:
			log.Warn("second signal: killing running jobs", "signal", sig.String())
		case <-time.After(c.grace):
			log.Warn("grace period over: killing running jobs", "running", r.Running())
		case <-ctx.Done():
		}
		killRunning(runner.ShutdownCause())
	})
	log.Info("worker started", "version", version, "provider", provider.Name(), "queues", queues,
		"concurrency", c.concurrency, "warm", c.warm, "profiles", profiles.Names(), "listen", ln.Addr().String())
	select {
	case <-tenants.Loaded():
	case <-startCtx.Done():
		log.Warn("tenant policies not read yet: every tenant is unlimited until they are")
	}
	serveErr := r.Serve(claimCtx, runCtx)
	stopClaiming()
	stopAll()
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	_ = srv.Shutdown(shutCtx)
	bg.Wait()
	if serveErr != nil {
		return serveErr
	}
	log.Info("worker stopped")
	return nil
}

// measureJobsStream keeps the metrics of the jobs stream's fullness current until ctx ends. One
// stream info every 15 s per worker: those requests share the server's API queue.
func measureJobsStream(ctx context.Context, js jetstream.JetStream, s job.Subjects, m *metrics.Metrics, log *slog.Logger) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		st, err := js.Stream(ctx, s.JobsStream())
		if err == nil {
			info := st.CachedInfo()
			m.JobsStream(info.State.Bytes, info.State.Msgs, info.Config.MaxBytes)
		} else if ctx.Err() == nil {
			log.Warn("jobs stream info", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// redisLog keeps go-redis's own lines out of the worker's standard error: they are debug lines of
// the worker's log, and a connection failure is reported once, by the worker.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// replicasToWait is how many replicas must acknowledge each reservation before its job is
// dispatched: one when the Redis has a replica at start (on a Cluster, every master), or when
// Sentinel watches it (a master Sentinel may replace has a replica to replace it with); a
// failover can then lose no dispatch. Without one, the log says what a crash costs.
func replicasToWait(ctx context.Context, log *slog.Logger, rdb redis.UniversalClient, sentinel bool) int {
	n, err := connectedReplicas(ctx, rdb)
	if err != nil {
		log.Warn("redis replication unknown", "err", err)
	}
	if n == 0 && !sentinel {
		log.Warn("redis has no replica: if it crashes, the writes it had not saved are lost and the jobs running then settle unknown (never run twice); give it a replica and min-replicas-to-write 1")
		return 0
	}
	log.Info("each dispatch waits for a replica to hold its reservation", "replicas_connected", n)
	return 1
}

// connectedReplicas is the master's count of connected replicas; on a Cluster, the least of
// its masters'.
func connectedReplicas(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		least := -1
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := connectedReplicas(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if least == -1 || n < least {
				least = n
			}
			return err
		})
		return max(least, 0), err
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(n)
		}
	}
	return 0, errors.New("INFO replication names no connected_slaves")
}

// rebuildIndex adds the row of every settlement kept to the job index and reports the counts.
func rebuildIndex(ctx context.Context, js jetstream.JetStream, subjects job.Subjects, rdb redis.UniversalClient, c *config, out io.Writer) error {
	client, err := runfleet.NewClient(ctx, nil, runfleet.Options{Prefix: c.prefix, JetStream: js})
	if err != nil {
		return err
	}
	index := jobindex.New(rdb, jobindex.Options{Prefix: c.prefix, Retention: c.retention})
	got, err := index.Rebuild(ctx, js, subjects, func(ctx context.Context, id string) (string, string, error) {
		req, err := client.Request(ctx, id)
		if errors.Is(err, runfleet.ErrNotFound) {
			return "", "", fmt.Errorf("%w: %w", jobindex.ErrUnplaced, err)
		}
		return req.Queue, req.Tenant, err
	})
	fmt.Fprintf(out, "job index: %d settlements read, %d rows added, %d without their request, %d past the retention\n",
		got.Settlements, got.Rows, got.Unplaced, got.Expired)
	return err
}
