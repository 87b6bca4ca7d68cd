package runner_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/fairshare"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/runner"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func TestMain(m *testing.M) {
	namespace.Init()
	containerinit.Init()
	goleak.VerifyTestMain(m)
}

// fleet is a real JetStream, a real Redis, and runners on the namespace provider.
type fleet struct {
	t        testing.TB
	nats     *testenv.NATS
	redis    *testenv.Redis
	client   *runfleet.Client
	js       jetstream.JetStream
	subjects job.Subjects
	// tenants is the tenant of each job submitAs stored, for wait: a job is its tenant and its id.
	tenants sync.Map
	dlog    string
	pool    *pool.Pool // of the last worker started
	// shutdown stops the last worker started as a SIGTERM does once its grace is over: it stops
	// claiming and kills the running jobs, which settle failed/worker_shutdown.
	shutdown func()
	// drain stops the last worker started as a SIGTERM does: it stops claiming and lets the
	// running jobs finish. served is closed when that worker's Serve returned.
	drain  func()
	served chan struct{}
}

func newFleet(t testing.TB) *fleet { return newFleetWith(t, protocol.StreamOptions{}) }

// newFleetWith makes the fleet's streams with so (a short dedup window, say).
func newFleetWith(t testing.TB, so protocol.StreamOptions) *fleet {
	t.Helper()
	testenv.NeedRoot(t)
	f := &fleet{t: t, nats: testenv.StartNATS(t), redis: testenv.StartRedis(t), dlog: filepath.Join(t.TempDir(), "dispatches")}
	var err error
	nc := f.nats.Conn()
	f.client, err = runfleet.NewClient(t.Context(), nc, runfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := protocol.EnsureStreams(t.Context(), f.js, f.client.Subjects(), so); err != nil {
		t.Fatal(err)
	}
	f.subjects = f.client.Subjects()
	return f
}

type workerOpts struct {
	id          string
	concurrency int // default 2
	ttl         time.Duration
	policy      func(*job.Policy)
	profiles    profile.Set      // added to the built-in ones
	reconnect   time.Duration    // the worker's own NATS connection waits this long to reconnect; 0 shares the test's
	docker      bool             // the Docker provider instead of the namespace one
	provider    sandbox.Provider // a provider of the test's own, instead of either
	warm        int              // sandboxes kept waiting per profile; 0: none
	observer    pool.Observer
	sandbox     runner.SandboxOptions
	settleWait  time.Duration // default 10 s
	slowDestroy time.Duration // each sandbox takes this much longer to destroy
	index       runner.Index
	tenants     fairshare.Policies // default: every tenant weight 1, unlimited
	running     bool               // keep max_running in the fleet's Redis
}

// startWorker runs a runner until the test ends.
func (f *fleet) startWorker(o workerOpts) *runner.Runner {
	t := f.t
	t.Helper()
	p, profiles, err := o.provider, profile.Set(nil), error(nil)
	switch dp, isDocker := p.(*docker.Provider); {
	case p == nil:
		p, profiles = f.provider(o.docker)
	case isDocker:
		if profiles, err = dp.Resolve(t.Context(), profile.Builtin("", testenv.Image())); err != nil {
			testenv.Missing(t, "sandbox image: %v", err)
		}
	default:
		profiles = profile.Builtin(testenv.RootFS(t), "")
	}
	if o.slowDestroy > 0 {
		p = slowDestroy{p, o.slowDestroy}
	}
	nc := f.nats.Conn()
	if o.reconnect > 0 {
		if nc, err = nats.Connect(f.nats.URL, nats.MaxReconnects(-1), nats.ReconnectWait(o.reconnect), nats.ReconnectJitter(0, 0)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	leases := lease.NewStore(f.redis.Client(), lease.Options{TTL: o.ttl})
	if err := leases.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	policy := job.DefaultPolicy()
	if o.policy != nil {
		o.policy(&policy)
	}
	maps.Copy(profiles, o.profiles)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	var shapes []sandbox.Shape
	for _, name := range profiles.Names() {
		shapes = append(shapes, o.sandbox.Shape(profiles[name], sandbox.Limits{MemoryBytes: policy.Default.MemoryBytes, Pids: policy.Default.Pids}))
	}
	warm := pool.New(p, shapes, pool.Options{Size: o.warm, Logger: log, Observer: o.observer})
	f.pool = warm
	var running *fairshare.Running
	if o.running {
		running = fairshare.NewRunning(f.redis.Client(), "runfleet", cmpOr(o.id, "w1"), leases.TTL())
	}
	r := runner.New(nc, js, f.subjects, leases, p, runner.Options{Running: running,
		Worker: cmpOr(o.id, "w1"), Concurrency: cmp.Or(o.concurrency, 2), Policy: policy,
		Profiles: profiles, SettleWait: cmp.Or(o.settleWait, 10*time.Second), MaxFailures: 3, Sandboxes: warm,
		Logger: log, Sandbox: o.sandbox, Index: o.index, Tenants: o.tenants,
	})
	claimCtx, stop := context.WithCancel(context.Background())
	runCtx, kill := context.WithCancelCause(context.Background())
	poolCtx, stopPool := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { warm.Run(poolCtx) })
	if o.warm > 0 {
		testenv.WaitFor(t, time.Minute, "the pool filled", func() bool { return warm.Waiting() == o.warm*len(shapes) })
	}
	served := make(chan struct{})
	wg.Go(func() {
		defer close(served)
		if err := r.Serve(claimCtx, runCtx); err != nil {
			t.Errorf("Serve() error = %v", err)
		}
	})
	f.drain, f.served = stop, served
	f.shutdown = func() {
		stop()
		kill(runner.ShutdownCause())
	}
	t.Cleanup(func() {
		stop()
		kill(runner.ShutdownCause())
		stopPool()
		wg.Wait()
	})
	return r
}

// provider is a namespace provider, or a Docker one, with its built-in profiles.
func (f *fleet) provider(useDocker bool) (sandbox.Provider, profile.Set) {
	t := f.t
	t.Helper()
	if useDocker {
		initBin, err := testenv.DockerInit()
		if err != nil {
			t.Fatalf("static worker for the container init: %v", err)
		}
		p, err := docker.New(t.Context(), docker.Options{Fleet: "runfleet-test-runner", DispatchLog: sandbox.DispatchLog{Path: f.dlog}, InitBinary: initBin})
		if err != nil {
			testenv.Missing(t, "docker daemon: %v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		profiles, err := p.Resolve(t.Context(), profile.Builtin("", testenv.Image()))
		if err != nil {
			testenv.Missing(t, "sandbox image (make image): %v", err)
		}
		return p, profiles
	}
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", DispatchLog: sandbox.DispatchLog{Path: f.dlog}})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, profile.Builtin(testenv.RootFS(t), "")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// result is what a job stored: its pages per stream and its settlement.
type result struct {
	stdout, stderr []byte
	pages          []runfleet.Page
	st             job.Settlement
}

func (f *fleet) submit(req job.Request) string {
	f.t.Helper()
	return f.submitAs("", req)
}

// submitAs submits req under tenant ("": the client's, default).
func (f *fleet) submitAs(tenant string, req job.Request) string {
	f.t.Helper()
	sub, err := f.client.Submit(f.t.Context(), "", req, &runfleet.SubmitOptions{Tenant: tenant})
	if err != nil {
		f.t.Fatalf("Submit() error = %v", err)
	}
	if tenant != "" {
		f.tenants.Store(sub.ID, tenant)
	}
	return sub.ID
}

func (f *fleet) wait(id string) result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 60*time.Second)
	defer cancel()
	var r result
	c := f.client
	if tenant, ok := f.tenants.Load(id); ok {
		c = f.as(tenant.(string))
	}
	st, err := c.Watch(ctx, id, func(p runfleet.Page) error {
		r.pages = append(r.pages, p)
		if p.Stream == job.Stdout {
			r.stdout = append(r.stdout, p.Data...)
		} else {
			r.stderr = append(r.stderr, p.Data...)
		}
		return nil
	})
	if err != nil {
		f.t.Fatalf("Watch(%s) error = %v", id, err)
	}
	r.st = st
	return r
}

// as is a client of tenant's jobs.
func (f *fleet) as(tenant string) *runfleet.Client {
	f.t.Helper()
	in, err := runfleet.NewInspector(nil, runfleet.InspectorOptions{JetStream: f.js})
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := in.Tenant(tenant)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fleet) run(req job.Request) result {
	f.t.Helper()
	return f.wait(f.submit(req))
}

// dispatches counts, per job, the payloads the provider let into a sandbox.
func (f *fleet) dispatches() map[string]int {
	f.t.Helper()
	n, err := sandbox.CountDispatches(f.dlog)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// pidsWithArg returns the host pids of processes that have arg in their command line: a job
// starts one with a marker argument so that the test sees its sandbox from the host.
func pidsWithArg(arg string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(cmdline), "\x00") {
			if a == arg {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// markedSleep is python3 code that starts a sandboxed child with marker in its command line,
// prints, then sleeps: the test sees the sandbox from the host while the job runs.
func markedSleep(marker string, seconds int) string {
	return fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['/usr/bin/sleep', '%s'])\nprint('up', flush=True)\ntime.sleep(%d)", marker, seconds)
}

func newMarker() string { return fmt.Sprintf("%d.%d", 100000+rand.IntN(900000), rand.IntN(1000)) }

// pagesStored is how many pages of job id are stored.
func (f *fleet) pagesStored(id string) uint64 {
	f.t.Helper()
	s, err := f.js.Stream(f.t.Context(), f.subjects.ResultsStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.t.Context(), jetstream.WithSubjectFilter(f.subjects.Page("default", id)))
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.Subjects[f.subjects.Page("default", id)]
}
