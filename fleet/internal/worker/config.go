package worker

import (
	"cmp"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Config is a worker's configuration: `worker`'s flags (docs/cli.md), one field each, and errors
// name a field by its flag. Zero fields take the defaults named.
type Config struct {
	ID      string // identity shown in settlements and heartbeats; default: the host name and a random suffix
	Version string // reported at start and in heartbeats; default "dev"

	NATS     cli.NATS // servers and credentials; default nats.DefaultURL
	RedisURL string   // leases and dispatch records (the forms of package redisurl); default redis://127.0.0.1:6379/0
	// Dev starts an embedded NATS JetStream on NATS.URL's first address and a child redis-server,
	// used in place of RedisURL: nothing is durable.
	Dev    bool
	Prefix string   // subject, stream and key prefix; default job.DefaultPrefix
	Queues []string // queues served; default [job.DefaultQueue]

	StreamReplicas    int           // JetStream replicas of the fleet's streams; default 1
	ArtifactsMaxBytes int64         // bound of the artifacts bucket; default protocol.DefaultArtifactsMaxBytes
	JobsMaxBytes      int64         // bound of the jobs stream; default protocol.DefaultJobsMaxBytes
	Retention         time.Duration // how long a job's record and request are kept; default protocol.DefaultRetention

	Provider    string // sandbox provider, "namespace" or "docker"; default "namespace"
	Profiles    string // JSON file of extra language profiles; default none
	Langs       string // directory of language manifests (fleet/langs), each offered where the root fs or image holds its toolchain; default none
	RootFS      string // namespace provider: root file system of the built-in profiles; default the host's /usr
	NoZygote    bool   // namespace provider: exec every sandbox's interpreter; default a zygote per profile that has one
	Image       string // docker provider: image of the built-in profiles; default DefaultImage
	DispatchLog string // file the provider appends one line to per dispatch; default none
	// Supervisor is the sandboxes' small static supervisor and container init; default: the
	// worker's own executable, which works the same and starts slower.
	Supervisor []byte

	Concurrency int           // sandboxes running at once; default runtime.NumCPU()
	Warm        int           // sandboxes per profile kept created and waiting; default Concurrency, negative none
	WarmRefills int           // waiting sandboxes created at once, across profiles; default pool.DefaultRefills
	WarmMaxAge  time.Duration // longest a sandbox waits before it is replaced; default pool.DefaultMaxAge
	CPUs        float64       // CPU quota of each sandbox, in cores; default 1, negative no quota
	MaxTimeout  time.Duration // largest timeout a job may ask for; default 5 minutes
	MaxPages    int64         // largest max_pages; default what a job of MaxTimeout needs (see Policy)
	MaxFailures int           // pre-dispatch failures before a job settles error; default 5
	LeaseTTL    time.Duration // how long a claim lives without a heartbeat; default lease.DefaultTTL
	// DispatchWithoutReplica dispatches jobs while too few Redis replicas acknowledge their
	// reservations, where the worker otherwise claims nothing until they do (not ready, jobs
	// waiting): the operator's choice to go on while a failover could lose reservations.
	DispatchWithoutReplica bool
	// Grace is how long running jobs may finish once the worker is told to stop; default 30
	// seconds, negative none (they are killed at once).
	Grace  time.Duration
	Listen string // HTTP address of /metrics, /healthz and /readyz; default "127.0.0.1:9464"

	// RebuildIndex makes Run add the list row of every settlement the results stream keeps to
	// the job index (after Redis lost data), write the counts to Output and return.
	RebuildIndex bool
	// Hook, when set, is told each phase a job passes (runner.Options.Hook): fault tests only.
	Hook func(phase string)
	// Output takes the lines meant for a person: the dev stack's addresses, RebuildIndex's
	// counts; default io.Discard.
	Output io.Writer
}

// Defaults of [Config].
const (
	DefaultImage  = "runfleet-sandbox:latest"
	DefaultListen = "127.0.0.1:9464"
	DefaultGrace  = 30 * time.Second
)

// withDefaults is c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = host + "-" + uuid.NewString()[:8]
	}
	c.Version = cmp.Or(c.Version, "dev")
	c.NATS.URL = cmp.Or(c.NATS.URL, nats.DefaultURL)
	c.RedisURL = cmp.Or(c.RedisURL, "redis://127.0.0.1:6379/0")
	c.Prefix = cmp.Or(c.Prefix, job.DefaultPrefix)
	if len(c.Queues) == 0 {
		c.Queues = []string{job.DefaultQueue}
	}
	c.StreamReplicas = cmp.Or(c.StreamReplicas, 1)
	c.ArtifactsMaxBytes = cmp.Or(c.ArtifactsMaxBytes, protocol.DefaultArtifactsMaxBytes)
	c.JobsMaxBytes = cmp.Or(c.JobsMaxBytes, protocol.DefaultJobsMaxBytes)
	c.Retention = cmp.Or(c.Retention, protocol.DefaultRetention)
	c.Provider = cmp.Or(c.Provider, "namespace")
	c.Image = cmp.Or(c.Image, DefaultImage)
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.Warm = max(cmp.Or(c.Warm, c.Concurrency), 0)
	c.WarmRefills = cmp.Or(c.WarmRefills, pool.DefaultRefills)
	c.WarmMaxAge = cmp.Or(c.WarmMaxAge, pool.DefaultMaxAge)
	c.CPUs = max(cmp.Or(c.CPUs, 1), 0)
	c.MaxTimeout = cmp.Or(c.MaxTimeout, 5*time.Minute)
	c.MaxFailures = cmp.Or(c.MaxFailures, 5)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, lease.DefaultTTL)
	c.Grace = max(cmp.Or(c.Grace, DefaultGrace), 0)
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	if c.Output == nil {
		c.Output = io.Discard
	}
	return c
}

// Policy is what the worker accepts of a job. Unless MaxPages says otherwise, its page cap holds
// a job of the longest timeout it accepts printing all along (job.PagesNeeded), so that a raised
// MaxTimeout never turns chatty output into page_limit.
func (c Config) Policy() job.Policy {
	c = c.withDefaults()
	p := job.DefaultPolicy()
	p.Max.Timeout = c.MaxTimeout
	p.Max.MaxPages = cmp.Or(c.MaxPages, max(p.Max.MaxPages, job.PagesNeeded(c.MaxTimeout, p.Max.OutputBytes, p.Default.PageBytes)))
	return p
}
