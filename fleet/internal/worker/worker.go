// Package worker is the composition root of a runfleet worker: [Run] connects to NATS and Redis,
// opens the sandbox provider, and runs the runner with the background services around it — the
// pool of waiting sandboxes, the tenant policies' watch, the metrics listener, the heartbeat, the
// job index and redrive services, the jobs stream's gauges and the reaper — each a
// [service.Service] that Run starts, owns, stops and waits for.
//
// A stop comes in two steps, as SIGTERM and a second signal make it: when ctx ends the worker
// claims no more, stops its heartbeat and reports itself not ready, and its running jobs have
// Config.Grace to finish; when the grace period is over or kill ends, they are killed and settle
// failed/worker_shutdown. Run returns as soon as no job runs, then stops the services in the
// reverse order of their starts: the waiting sandboxes are destroyed before it returns.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/devstack"
	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/jobindex"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/metrics"
	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/redisurl"
	"github.com/runfleet/runfleet/fleet/internal/redrive"
	"github.com/runfleet/runfleet/fleet/internal/runner"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/service"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// startTimeout bounds the start: the streams, Redis's first answer, the provider's checks.
const startTimeout = 15 * time.Second

// Run runs a worker until ctx ends, then stops it: running jobs may finish for c.Grace, or until
// kill ends, and are killed after. It returns nil after a clean stop, and the error that ended
// it otherwise. A stop that comes while the worker starts is a clean stop too.
func Run(ctx, kill context.Context, c Config, log *slog.Logger) error {
	c = c.withDefaults()
	err := run(ctx, kill, c, log)
	if err != nil && ctx.Err() != nil && !c.RebuildIndex {
		log.Info("worker stopped while starting", "err", err)
		return nil
	}
	return err
}

func run(ctx, kill context.Context, c Config, log *slog.Logger) error {
	if c.Dev {
		stack, err := devstack.Start(ctx, strings.Split(c.NATS.URL, ",")[0])
		if err != nil {
			return err
		}
		defer stack.Stop()
		c.NATS.URL, c.RedisURL = stack.NATSURL, stack.RedisURL
		log.Warn("dev mode: embedded NATS JetStream and a child redis-server; NOT DURABLE, jobs and results are lost on exit",
			"nats_url", cli.RedactURL(c.NATS.URL), "redis_url", redisurl.Redact(c.RedisURL))
		fmt.Fprintf(c.Output, "runfleet dev stack: NATS %s, Redis %s (not durable)\n", c.NATS.URL, c.RedisURL)
	}
	subjects, err := job.NewSubjects(c.Prefix)
	if err != nil {
		return err
	}
	nc, err := cli.ConnectNATS(c.NATS, "runfleet-worker "+c.ID, log)
	if err != nil {
		return err
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	startCtx, cancelStart := context.WithTimeout(ctx, startTimeout)
	defer cancelStart()
	if err := protocol.EnsureStreams(startCtx, js, subjects, protocol.StreamOptions{Replicas: c.StreamReplicas,
		ArtifactsMaxBytes: c.ArtifactsMaxBytes, Retention: c.Retention, JobsMaxBytes: c.JobsMaxBytes}); err != nil {
		return err
	}
	ru, err := redisurl.Parse(c.RedisURL)
	if err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	rdb := ru.Open()
	defer rdb.Close()
	if err := rdb.Ping(startCtx).Err(); err != nil {
		return fmt.Errorf("redis %s unreachable: %w", ru.Redacted(), err)
	}
	if c.RebuildIndex {
		return rebuildIndex(ctx, js, subjects, rdb, c)
	}
	replicas := replicasToWait(startCtx, log, rdb, ru.Kind == redisurl.Sentinel)
	leases := lease.NewStore(rdb, lease.Options{Prefix: c.Prefix, TTL: c.LeaseTTL, Replicas: replicas, RecordTTL: c.Retention})
	if err := leases.Init(startCtx); err != nil {
		return err
	}
	sb, err := openSandboxes(startCtx, c, log)
	if err != nil {
		return err
	}
	defer sb.close()
	if err := runner.SelfCheck(startCtx, sb.provider, sb.profiles); err != nil {
		return err
	}

	tenantsKV, err := tenant.EnsureBucket(startCtx, js, subjects, c.StreamReplicas)
	if err != nil {
		return err
	}
	var tenants tenant.Policies
	policy := c.Policy()
	m := metrics.New(metrics.Options{Slots: c.Concurrency, Tenants: &tenants, Queues: c.Queues, Version: c.Version})
	if sb.removalsPending != nil {
		m.RemovalsPending(sb.removalsPending)
	}
	sopts := runner.SandboxOptions{CPUs: c.CPUs}
	var shapes []sandbox.Shape
	for _, name := range sb.profiles.Names() {
		// A waiting sandbox holds the default limits; its job's own replace them when it is taken.
		d := policy.Default
		shapes = append(shapes, sopts.Shape(sb.profiles[name], sandbox.Limits{Timeout: d.Timeout, MemoryBytes: d.MemoryBytes, Pids: d.Pids}))
	}
	warm := pool.New(sb.provider, shapes, pool.Options{Size: c.Warm, MaxAge: c.WarmMaxAge, Refills: c.WarmRefills, Logger: log, Observer: m})
	index := jobindex.New(rdb, jobindex.Options{Prefix: c.Prefix, Retention: c.Retention})
	insp, err := runfleet.NewInspector(nil, runfleet.InspectorOptions{Prefix: c.Prefix, JetStream: js})
	if err != nil {
		return err
	}
	redrives := redrive.New(redrive.ClientFleet{Inspector: insp}, index, rdb, redrive.Options{Prefix: c.Prefix, Logger: log,
		Worker: c.ID, HoldTTL: c.LeaseTTL})
	r := runner.New(nc, js, subjects, leases, sb.provider, runner.Options{
		Worker: c.ID, Queues: c.Queues, Concurrency: c.Concurrency, Policy: policy, Profiles: sb.profiles,
		MaxFailures: c.MaxFailures, DispatchWithoutReplica: c.DispatchWithoutReplica, Sandbox: sopts, Sandboxes: warm,
		Logger: log, Observer: m, Hook: c.Hook, Index: index, Usage: index, Declared: &tenants,
		Tenants: &tenants, Running: fairshare.NewRunning(rdb, c.Prefix, c.ID, c.LeaseTTL),
	})

	m.DurabilityUnmet(r.DurabilityUnmet)
	var draining atomic.Bool
	listener := newListener(c.Listen, m.Handler(checks(nc, rdb, sb.provider, r, &draining)), log)
	// The services live until Run stops them, after the runner's last job: a stop leaves them
	// running while jobs drain (the pool, /readyz, the reaper), all but the heartbeat, which ends
	// with ctx so that `submit workers` no longer offers a draining worker.
	var services service.Group
	defer services.Stop()
	life := context.WithoutCancel(ctx)
	if err := services.Start(life,
		// The pool stops last: every waiting sandbox is destroyed before the provider closes.
		service.NewLoop("pool", log, func(ctx context.Context) error { warm.Run(ctx); return nil }),
		service.NewLoop("tenant policies", log, func(ctx context.Context) error { return tenants.Follow(ctx, tenantsKV, log) }),
		service.NewLoop("jobs stream", log, func(ctx context.Context) error { measureJobsStream(ctx, js, subjects, m, log); return nil }),
		service.NewLoop("reaper", log, func(ctx context.Context) error { reapEvery(ctx, time.Minute, sb.reap); return nil }),
		service.NewLoop("job index", log, func(ctx context.Context) error { return index.Serve(ctx, nc, subjects, log) }),
		service.NewLoop("redrive service", log, func(ctx context.Context) error { return redrives.Serve(ctx, nc, subjects) }),
		listener,
	); err != nil {
		return err
	}
	answering := make(chan struct{})
	if err := services.Start(ctx, service.NewLoop("heartbeat", log, func(ctx context.Context) error {
		heartbeats(ctx, nc, subjects, c, sb.provider.Name(), sb.profiles, r, warm, answering)
		return nil
	})); err != nil {
		return err
	}
	select {
	case <-answering:
	case <-ctx.Done():
	}
	log.Info("worker started", "version", c.Version, "provider", sb.provider.Name(), "queues", c.Queues,
		"concurrency", c.Concurrency, "warm", c.Warm, "profiles", sb.profiles.Names(), "listen", listener.Addr())
	select {
	case <-tenants.Loaded():
	case <-startCtx.Done():
		if ctx.Err() == nil {
			log.Warn("tenant policies not read yet: every tenant is unlimited until they are")
		}
	}
	if err := serve(ctx, kill, r, c.Grace, &draining, log); err != nil {
		return err
	}
	services.Stop()
	log.Info("worker stopped")
	return nil
}

// serve runs r until ctx ends, then lets its running jobs finish for grace, or until kill ends,
// and kills those left; it returns once none runs.
func serve(ctx, kill context.Context, r *runner.Runner, grace time.Duration, draining *atomic.Bool, log *slog.Logger) error {
	runCtx, killRunning := context.WithCancelCause(context.WithoutCancel(ctx))
	defer killRunning(nil)
	served := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(served)
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		draining.Store(true)
		log.Info("stop claiming, let running jobs finish", "cause", context.Cause(ctx).Error(), "grace", grace.String(), "running", r.Running())
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-kill.Done():
			log.Warn("told to stop at once: killing running jobs", "cause", context.Cause(kill).Error(), "running", r.Running())
		case <-t.C:
			log.Warn("grace period over: killing running jobs", "running", r.Running())
		case <-served:
			return
		}
		killRunning(runner.ShutdownCause())
	})
	return r.Serve(ctx, runCtx)
}

// checks are /readyz's.
func checks(nc *nats.Conn, rdb redis.UniversalClient, provider sandbox.Provider, r *runner.Runner, draining *atomic.Bool) map[string]metrics.Check {
	return map[string]metrics.Check{
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
		"replicas": func(context.Context) error { return r.Durability() },
		"consuming": func(context.Context) error {
			if !r.Consuming() {
				return errors.New("not consuming its queues")
			}
			return nil
		},
	}
}
