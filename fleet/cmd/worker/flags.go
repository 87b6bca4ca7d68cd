package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/redisurl"
	"github.com/runfleet/runfleet/fleet/internal/worker"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// config holds the values of the flags.
type config struct {
	redisURL, prefix, queues, provider, profiles, listen, id string
	logger                                                   func(io.Writer) *slog.Logger
	nats                                                     cli.NATS
	concurrency, warm, warmRefills                           int
	warmMaxAge                                               time.Duration
	leaseTTL, grace, retention                               time.Duration
	dev, rebuildIndex, dispatchWithoutReplica, zygote        bool
	rootfs, image, dispatchLog, langs                        string
	cpus                                                     float64
	maxTimeout                                               time.Duration
	maxPages                                                 int64
	maxFailures, streamReplicas                              int
	hook                                                     func() func(phase string)
	artifactsMaxBytes, jobsMaxBytes                          cli.ByteSize
}

const usage = `usage: worker [flags]

Claims runfleet jobs from NATS JetStream and runs each in a fresh sandbox, leases in Redis.
--dev needs no outside service: an embedded NATS and a child redis-server, not durable.
SIGTERM or SIGINT drains (running jobs get --grace); a second signal kills them at once.

Every flag also reads RUNFLEET_<NAME> from the environment (--redis-url ↔ RUNFLEET_REDIS_URL).
Sizes: bytes, or k, m, g, t (KiB, MiB, GiB, TiB). docs/cli.md and docs/operations.md say more.

Flags:
`

// flags is the worker's flag set, whose --help prints on stdout.
func flags(stdout io.Writer) (*flag.FlagSet, *config) {
	c := &config{}
	fs := cli.NewFlagSet("worker", usage, stdout)
	host, _ := os.Hostname()
	c.nats.Register(fs)
	fs.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis for leases and dispatch records")
	fs.StringVar(&c.prefix, "prefix", job.DefaultPrefix, "subject, stream and key prefix")
	fs.StringVar(&c.queues, "queues", job.DefaultQueue, "queues to serve, comma separated")
	fs.IntVar(&c.concurrency, "concurrency", runtime.NumCPU(), "sandboxes running at once")
	fs.IntVar(&c.warm, "warm", -1, "sandboxes per profile kept created and waiting, never used before; 0 disables (default --concurrency)")
	fs.IntVar(&c.warmRefills, "warm-refills", pool.DefaultRefills, "waiting sandboxes created at once, across profiles")
	fs.DurationVar(&c.warmMaxAge, "warm-max-age", pool.DefaultMaxAge, "longest a sandbox waits before it is replaced")
	fs.StringVar(&c.provider, "provider", "namespace", "sandbox provider: docker, gvisor (Docker with gVisor's runsc runtime) or namespace")
	fs.StringVar(&c.profiles, "profiles", "", "JSON file of extra language profiles (built in: python3, nodejs)")
	fs.StringVar(&c.langs, "langs", "", "directory of more language manifests, beside those the root fs or image ships (make langs); each offered where the root fs or image holds its toolchain")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", lease.DefaultTTL, "how long a claim lives without a heartbeat")
	fs.DurationVar(&c.grace, "grace", worker.DefaultGrace, "on SIGTERM, how long running jobs may finish")
	c.logger = cli.LogLevel(fs)
	fs.StringVar(&c.listen, "listen", worker.DefaultListen, "HTTP address of /metrics, /healthz, /readyz")
	fs.StringVar(&c.id, "id", host+"-"+uuid.NewString()[:8], "worker identity, shown in settlements")
	fs.BoolVar(&c.dev, "dev", false, "start an embedded NATS JetStream and a child redis-server (not durable)")
	fs.StringVar(&c.rootfs, "rootfs", "", "namespace provider: root file system of the built-in profiles and of the languages it ships (default: the host's /usr; with --dev, "+devLangsRoot+" when make langs built it here)")
	fs.BoolVar(&c.zygote, "zygote", true, "namespace provider: fork python3 and python3-data sandboxes from a zygote per profile (false: exec each interpreter; see docs/operations.md)")
	fs.StringVar(&c.image, "image", worker.DefaultImage, "docker and gvisor providers: image of the built-in profiles")
	fs.Float64Var(&c.cpus, "cpus", 1, "CPU quota of each sandbox, in cores")
	fs.DurationVar(&c.maxTimeout, "max-timeout", 5*time.Minute, "largest timeout_ms a job may ask for")
	fs.Int64Var(&c.maxPages, "max-pages", 0, "largest max_pages a job may ask for or get by default (default: what a job of --max-timeout needs)")
	fs.IntVar(&c.maxFailures, "max-failures", 5, "pre-dispatch failures before a job settles error")
	fs.BoolVar(&c.dispatchWithoutReplica, "dispatch-without-replica", false, "while too few Redis replicas acknowledge the reservations, dispatch jobs anyway instead of claiming none until they do (a failover then may lose reservations)")
	fs.IntVar(&c.streamReplicas, "stream-replicas", 1, "JetStream replicas of the fleet's streams (3 on a 3-node cluster); an existing stream is raised, never lowered")
	fs.StringVar(&c.dispatchLog, "dispatch-log", "", "file the provider appends one line to per dispatch (audits, tests)")
	c.artifactsMaxBytes = protocol.DefaultArtifactsMaxBytes
	fs.Var(&c.artifactsMaxBytes, "artifacts-max-bytes", "bound of the artifacts bucket (a size: 10g, 512MiB, 1t); a put past it fails, nothing stored is dropped")
	fs.BoolVar(&c.rebuildIndex, "rebuild-index", false, "add the list row of every settlement the results stream keeps to the job index (after Redis lost data), print the counts and exit")
	fs.DurationVar(&c.retention, "retention", protocol.DefaultRetention, "how long a job's record and its stored request are kept (lookup, dedup, redrive)")
	c.jobsMaxBytes = protocol.DefaultJobsMaxBytes
	fs.Var(&c.jobsMaxBytes, "jobs-max-bytes", "bound of the jobs stream, the kept requests (a size: 10g, 512MiB); a publish past it is refused, nothing stored is dropped")
	c.hook = faultHook(fs)
	return fs, c
}

// minRetention is the shortest --retention: a request must outlive the time a job waits, runs and
// settles (and the duplicate window of streams made before protocol version 3, 2 min, which
// JetStream requires MaxAge to cover).
const minRetention = 2 * time.Minute

// validate checks what can be checked before connecting to anything, so that a wrong flag is
// reported as itself and not as the failure it would cause later.
func (c *config) validate() error {
	switch {
	case c.provider != "namespace" && c.provider != "docker" && c.provider != "gvisor":
		return fmt.Errorf("--provider %q: want docker, gvisor or namespace", c.provider)
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
		return fmt.Errorf("--retention %v: want at least %v", c.retention, minRetention)
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

// worker is the worker's configuration the flags make; where a flag's zero means something
// (--warm 0: no pool, --cpus 0: no quota, --grace 0: no grace), the Config's is negative.
func (c *config) worker(out io.Writer) worker.Config {
	warm := c.warm
	switch warm {
	case -1:
		warm = 0 // --concurrency
	case 0:
		warm = -1
	}
	return worker.Config{
		ID: c.id, Version: cli.Version(), NATS: c.nats, RedisURL: c.redisURL, Dev: c.dev, Prefix: c.prefix,
		Queues: strings.Split(c.queues, ","), StreamReplicas: c.streamReplicas,
		ArtifactsMaxBytes: int64(c.artifactsMaxBytes), JobsMaxBytes: int64(c.jobsMaxBytes), Retention: c.retention,
		Provider: c.provider, Profiles: c.profiles, Langs: c.langs, RootFS: c.devRootFS(), Image: c.image, DispatchLog: c.dispatchLog,
		Supervisor: supervisorBin, NoZygote: !c.zygote, Concurrency: c.concurrency, Warm: warm, WarmRefills: c.warmRefills,
		WarmMaxAge: c.warmMaxAge, CPUs: negativeIfZero(c.cpus), MaxTimeout: c.maxTimeout, MaxPages: c.maxPages,
		MaxFailures: c.maxFailures, DispatchWithoutReplica: c.dispatchWithoutReplica, LeaseTTL: c.leaseTTL, Grace: negativeIfZero(c.grace), Listen: c.listen,
		RebuildIndex: c.rebuildIndex, Hook: c.hook(), Output: out,
	}
}

// devLangsRoot is where `make langs` builds its root fs, relative to the checkout.
const devLangsRoot = "var/rootfs-langs"

// devRootFS is --rootfs; for `worker --dev` on the namespace provider run in a checkout where
// `make langs` built its root fs, that root fs, so that the dev worker serves every shipped
// language with no flag.
func (c *config) devRootFS() string {
	if c.rootfs != "" || !c.dev || c.provider != "namespace" {
		return c.rootfs
	}
	if _, err := os.Stat(filepath.Join(devLangsRoot, profile.ShippedDir)); err != nil {
		return ""
	}
	abs, err := filepath.Abs(devLangsRoot)
	if err != nil {
		return ""
	}
	return abs
}

func negativeIfZero[T time.Duration | float64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
