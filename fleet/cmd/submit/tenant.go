package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

const tenantUsage = `usage: submit tenant set NAME [--max-queued N] [--max-running N] [--weight W] [--max-kept-bytes SIZE] [--max-jobs-kept N] [--max-artifact-bytes SIZE] [flags]
       submit tenant key add NAME [flags]
       submit tenant key list NAME [flags]
       submit tenant key remove NAME DIGEST-PREFIX [flags]
       submit tenant delete NAME [--force] [flags]
       submit tenant show [NAME] [--json] [flags]
       submit tenant rotate-session-secret [flags]

Tenants' policies, kept in the fleet's KV bucket RUNFLEET_TENANTS (docs/protocol.md, "Tenants");
workers and gateways apply a change within 5 s. set changes only the bounds given and keeps the
rest (and the keys); 0 means no bound. key add prints a new API key for the gateway once and
stores only its SHA-256; key list prints the digests, key remove revokes one (at the API and in
open web sessions), delete removes the tenant's entry and keys. show lists each policy with the
tenant's jobs queued and running now. rotate-session-secret ends every web view session.
Each subcommand answers --help with its own flags.
`

// tenantCommand is `submit tenant ...`; global are the flags given before `tenant`.
func tenantCommand(global, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "set":
		return tenantSet(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "show":
		return tenantShow(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 1 && args[0] == "key" && args[1] == "add":
		return tenantKeyAdd(slices.Concat(global, args[2:]), getenv, stdout, stderr)
	case len(args) > 1 && args[0] == "key" && args[1] == "list":
		return tenantKeyList(slices.Concat(global, args[2:]), getenv, stdout, stderr)
	case len(args) > 1 && args[0] == "key" && args[1] == "remove":
		return tenantKeyRemove(slices.Concat(global, args[2:]), getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "delete":
		return tenantDelete(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "rotate-session-secret":
		return tenantRotate(slices.Concat(global, args[1:]), getenv, stdout, stderr)
	case len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h"):
		fmt.Fprint(stdout, tenantUsage)
		return 0
	}
	return usageFailed(stderr, errors.New("submit tenant: want set, key add|list|remove, delete, show or rotate-session-secret"))
}

const tenantSetUsage = `usage: submit tenant set NAME [--max-queued N] [--max-running N] [--weight W] [--max-kept-bytes SIZE] [--max-jobs-kept N] [--max-artifact-bytes SIZE] [flags]

Writes tenant NAME's policy: only the bounds given change, the others and the tenant's keys are
kept; a tenant without an entry gets one. 0 means no bound (and weight 1). The bucket is made
when it is missing.

Flags:
`

// tenantSet is `submit tenant set NAME`.
func tenantSet(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		name                     string
		p                        tenant.Policy
		keptBytes, artifactBytes cli.ByteSize
		given                    = map[string]bool{}
	)
	return bucketCommand{name: "submit tenant set", usage: tenantSetUsage, create: true,
		flags: func(fs *flag.FlagSet, _ *options) {
			fs.Int64Var(&p.MaxQueued, "max-queued", 0, "jobs of the tenant stored and not yet started, at most (0: no bound)")
			fs.Int64Var(&p.MaxRunning, "max-running", 0, "jobs of the tenant holding a sandbox at once across the fleet, at most (0: no bound)")
			fs.Float64Var(&p.Weight, "weight", 0, fmt.Sprintf("share of the fleet's CPU time among tenants with jobs waiting, 0 to %d (0: 1)", protocol.MaxTenantWeight))
			fs.Var(&keptBytes, "max-kept-bytes", "bytes of the tenant's settled requests the fleet keeps, at most, a size: 256m, 1g (0: no bound)")
			fs.Int64Var(&p.MaxJobsKept, "max-jobs-kept", 0, "settled jobs of the tenant kept (its rows of the job index), at most (0: no bound)")
			fs.Var(&artifactBytes, "max-artifact-bytes", "bytes of the tenant's artifacts stored, at most, a size (0: no bound)")
		},
		check: func(fs *flag.FlagSet, _ options, pos []string) (err error) {
			p.MaxKeptBytes, p.MaxArtifactBytes = int64(keptBytes), int64(artifactBytes)
			fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
			if name, err = tenantName(pos, "submit tenant set NAME [--max-queued N] [--max-running N] [--weight W] [--max-kept-bytes SIZE] [--max-jobs-kept N] [--max-artifact-bytes SIZE]"); err != nil {
				return err
			}
			return p.Validate()
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			got, err := tenant.Update(ctx, b.kv, name, func(cur *tenant.Policy) {
				if given["max-queued"] {
					cur.MaxQueued = p.MaxQueued
				}
				if given["max-running"] {
					cur.MaxRunning = p.MaxRunning
				}
				if given["weight"] {
					cur.Weight = p.Weight
				}
				if given["max-kept-bytes"] {
					cur.MaxKeptBytes = p.MaxKeptBytes
				}
				if given["max-jobs-kept"] {
					cur.MaxJobsKept = p.MaxJobsKept
				}
				if given["max-artifact-bytes"] {
					cur.MaxArtifactBytes = p.MaxArtifactBytes
				}
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "tenant %s: max_queued %s, max_running %s, weight %s, max_kept_bytes %s, max_jobs_kept %s, max_artifact_bytes %s, %d keys\n", name,
				bound(got.MaxQueued), bound(got.MaxRunning), strconv.FormatFloat(got.EffectiveWeight(), 'g', -1, 64),
				bound(got.MaxKeptBytes), bound(got.MaxJobsKept), bound(got.MaxArtifactBytes), len(got.APIKeysSHA256))
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantKeyUsage = `usage: submit tenant key add NAME [flags]

Makes a new random API key for tenant NAME and prints it on standard output, this once: only its
SHA-256 is stored, in the tenant's policy (made when it has none). The gateway files a job sent
with the key under the tenant.

Flags:
`

// tenantKeyAdd is `submit tenant key add NAME`.
func tenantKeyAdd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var name string
	return bucketCommand{name: "submit tenant key add", usage: tenantKeyUsage, create: true,
		check: func(_ *flag.FlagSet, _ options, pos []string) (err error) {
			name, err = tenantName(pos, "submit tenant key add NAME")
			return err
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, stderr io.Writer) error {
			key := tenant.NewKey()
			digest := tenant.HashKey(key)
			if _, err := tenant.Update(ctx, b.kv, name, func(p *tenant.Policy) {
				if !slices.Contains(p.APIKeysSHA256, digest) { // the CAS loop may call this again
					p.APIKeysSHA256 = append(p.APIKeysSHA256, digest)
				}
			}); err != nil {
				return err
			}
			fmt.Fprintln(stdout, key)
			fmt.Fprintf(stderr, "submit: a new key of tenant %s; only its SHA-256 is stored, so keep it now\n", name)
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantKeyListUsage = `usage: submit tenant key list NAME [flags]

Prints the SHA-256 digests of tenant NAME's keys, one a line (the keys themselves are never
stored). key remove takes a prefix of one.

Flags:
`

// tenantKeyList is `submit tenant key list NAME`.
func tenantKeyList(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var name string
	return bucketCommand{name: "submit tenant key list", usage: tenantKeyListUsage,
		check: func(_ *flag.FlagSet, _ options, pos []string) (err error) {
			name, err = tenantName(pos, "submit tenant key list NAME")
			return err
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			p, err := policyOf(ctx, b, name)
			if err != nil {
				return err
			}
			for _, d := range p.APIKeysSHA256 {
				fmt.Fprintln(stdout, d)
			}
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantKeyRemoveUsage = `usage: submit tenant key remove NAME DIGEST-PREFIX [flags]

Revokes the key of tenant NAME whose SHA-256 digest (as key list prints it) starts with
DIGEST-PREFIX, at least 8 hex digits and matching one key only. Gateways refuse the key, at the
API and in the web sessions it opened, within 5 s.

Flags:
`

// minDigestPrefix is the shortest prefix key remove takes: a typo must not match a key by chance.
const minDigestPrefix = 8

// tenantKeyRemove is `submit tenant key remove NAME DIGEST-PREFIX`.
func tenantKeyRemove(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var name, prefix string
	return bucketCommand{name: "submit tenant key remove", usage: tenantKeyRemoveUsage,
		check: func(_ *flag.FlagSet, _ options, pos []string) (err error) {
			const usage = "submit tenant key remove NAME DIGEST-PREFIX"
			if len(pos) != 2 {
				return errors.New("usage: " + usage)
			}
			if name, err = tenantName(pos[:1], usage); err != nil {
				return err
			}
			prefix = strings.ToLower(pos[1])
			if len(prefix) < minDigestPrefix || len(prefix) > 64 || strings.Trim(prefix, "0123456789abcdef") != "" {
				return fmt.Errorf("digest prefix %q: want %d to 64 hex digits of a key's digest (submit tenant key list)", pos[1], minDigestPrefix)
			}
			return nil
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			if b.kv == nil {
				return fmt.Errorf("tenant %s: %w", name, tenant.ErrNoEntry)
			}
			var removed string
			p, err := tenant.Edit(ctx, b.kv, name, func(p *tenant.Policy) error {
				var match []int
				for i, d := range p.APIKeysSHA256 {
					if strings.HasPrefix(d, prefix) {
						match = append(match, i)
					}
				}
				switch len(match) {
				case 0:
					return fmt.Errorf("tenant %s has no key whose digest starts with %s", name, prefix)
				case 1:
					removed = p.APIKeysSHA256[match[0]]
					p.APIKeysSHA256 = slices.Delete(p.APIKeysSHA256, match[0], match[0]+1)
					return nil
				}
				return fmt.Errorf("tenant %s has %d keys whose digest starts with %s: give more digits", name, len(match), prefix)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "tenant %s: key %s removed, %d left\n", name, removed, len(p.APIKeysSHA256))
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantDeleteUsage = `usage: submit tenant delete NAME [--force] [flags]

Removes tenant NAME's policy, and with it its keys: gateways refuse them, at the API and in the
web sessions they opened, within 5 s, and the tenant takes the default entry's policy. Refused
while the tenant has jobs queued or running, unless --force (its jobs stay and run).

Flags:
`

// tenantDelete is `submit tenant delete NAME`.
func tenantDelete(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		name  string
		force bool
		s     job.Subjects
	)
	return bucketCommand{name: "submit tenant delete", usage: tenantDeleteUsage,
		flags: func(fs *flag.FlagSet, _ *options) {
			fs.BoolVar(&force, "force", false, "delete even while the tenant has jobs queued or running")
		},
		check: func(_ *flag.FlagSet, o options, pos []string) (err error) {
			if name, err = tenantName(pos, "submit tenant delete NAME [--force]"); err != nil {
				return err
			}
			s, err = job.NewSubjects(o.prefix)
			return err
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			if _, err := policyOf(ctx, b, name); err != nil {
				return err
			}
			if !force {
				backlogs, err := queue.Tenants(ctx, b.js, s)
				if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					return err
				}
				var queued uint64
				running := 0
				for pair, bl := range backlogs {
					if pair.Tenant == name {
						queued, running = queued+bl.Pending, running+bl.AckPending
					}
				}
				if queued > 0 || running > 0 {
					return fmt.Errorf("tenant %s has %d jobs queued and %d running: not deleted (--force deletes it anyway; its jobs stay)", name, queued, running)
				}
			}
			if err := tenant.Delete(ctx, b.kv, name); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "tenant %s deleted: its keys no longer act for it\n", name)
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantRotateUsage = `usage: submit tenant rotate-session-secret [flags]

Replaces the secret that signs the gateways' web view sessions (kept in the tenants bucket): every
open session ends within 5 s and its users log in again.

Flags:
`

// tenantRotate is `submit tenant rotate-session-secret`.
func tenantRotate(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return bucketCommand{name: "submit tenant rotate-session-secret", usage: tenantRotateUsage, create: true,
		check: func(_ *flag.FlagSet, _ options, pos []string) error {
			if len(pos) != 0 {
				return errors.New("usage: submit tenant rotate-session-secret")
			}
			return nil
		},
		do: func(ctx context.Context, b bucket, _ options, stdout, _ io.Writer) error {
			if err := tenant.RotateSessionSecret(ctx, b.kv); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "session secret replaced: every web view session ends")
			return nil
		},
	}.run(args, getenv, stdout, stderr)
}

const tenantShowUsage = `usage: submit tenant show [NAME] [--json] [flags]

Lists tenants, sorted by name: those with a policy and those with jobs on a queue but no policy
of their own (shown "-": the default entry's policy applies), each with its jobs queued (stored,
not yet started) and running (claimed by a worker) now. Keys are counted, never shown. --json
prints one JSON object a line.

Flags:
`

// tenantRow is a line of submit tenant show.
type tenantRow struct {
	Tenant string `json:"tenant"`
	// Policy is the tenant's own entry; null when it has none (the default's applies).
	Policy  *policyRow `json:"policy"`
	Queued  uint64     `json:"queued"`
	Running int        `json:"running"`
}

// policyRow is a policy as show prints it: its keys counted.
type policyRow struct {
	MaxQueued        int64   `json:"max_queued"`
	MaxRunning       int64   `json:"max_running"`
	Weight           float64 `json:"weight"`
	MaxKeptBytes     int64   `json:"max_kept_bytes"`
	MaxJobsKept      int64   `json:"max_jobs_kept"`
	MaxArtifactBytes int64   `json:"max_artifact_bytes"`
	APIKeys          int     `json:"api_keys"`
}

// tenantShow is `submit tenant show [NAME]`.
func tenantShow(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		only string
		s    job.Subjects
	)
	return bucketCommand{name: "submit tenant show", usage: tenantShowUsage,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.json, "json", false, "print NDJSON, one tenant a line")
		},
		check: func(_ *flag.FlagSet, o options, pos []string) (err error) {
			switch {
			case len(pos) > 1:
				return fmt.Errorf("usage: submit tenant show [NAME], got %q", pos)
			case len(pos) == 1 && !job.ValidTenant(pos[0]):
				return fmt.Errorf("tenant %q: %w", pos[0], job.ErrInvalidTenant)
			case len(pos) == 1:
				only = pos[0]
			}
			s, err = job.NewSubjects(o.prefix)
			return err
		},
		do: func(ctx context.Context, b bucket, o options, stdout, stderr io.Writer) error {
			rows, err := tenantRows(ctx, b.js, b.kv, s, stderr)
			if err != nil {
				return err
			}
			if only != "" {
				row, ok := rows[only]
				if !ok {
					row = &tenantRow{Tenant: only}
				}
				rows = map[string]*tenantRow{only: row}
			}
			names := slices.Sorted(maps.Keys(rows))
			if o.json {
				enc := json.NewEncoder(stdout)
				for _, n := range names {
					if err := enc.Encode(rows[n]); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tMAX_QUEUED\tMAX_RUNNING\tWEIGHT\tKEYS\tQUEUED\tRUNNING")
			for _, n := range names {
				r := rows[n]
				mq, mr, w, keys := "-", "-", "-", "-"
				if p := r.Policy; p != nil {
					mq, mr, keys = bound(p.MaxQueued), bound(p.MaxRunning), strconv.Itoa(p.APIKeys)
					w = strconv.FormatFloat(tenant.Policy{Weight: p.Weight}.EffectiveWeight(), 'g', -1, 64)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Tenant, mq, mr, w, keys, r.Queued, r.Running)
			}
			return tw.Flush()
		},
	}.run(args, getenv, stdout, stderr)
}

// tenantRows reads every policy of kv (none when kv is nil: no bucket yet) and every tenant's
// backlog, summed over its queues.
func tenantRows(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, s job.Subjects, stderr io.Writer) (map[string]*tenantRow, error) {
	rows := map[string]*tenantRow{}
	row := func(name string) *tenantRow {
		if rows[name] == nil {
			rows[name] = &tenantRow{Tenant: name}
		}
		return rows[name]
	}
	if kv != nil {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", kv.Bucket(), err)
		}
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil { // the initial values are all read
				break
			}
			if protocol.IsReservedTenantKey(e.Key()) { // the web view's session state
				continue
			}
			p, err := protocol.DecodeTenantPolicy(e.Value())
			if err != nil { // workers treat it as no entry; say why it shows as none
				fmt.Fprintf(stderr, "submit: tenant %s: %v\n", e.Key(), err)
				row(e.Key())
				continue
			}
			row(e.Key()).Policy = &policyRow{MaxQueued: p.MaxQueued, MaxRunning: p.MaxRunning, Weight: p.Weight,
				MaxKeptBytes: p.MaxKeptBytes, MaxJobsKept: p.MaxJobsKept, MaxArtifactBytes: p.MaxArtifactBytes, APIKeys: len(p.APIKeysSHA256)}
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", kv.Bucket(), err)
		}
	}
	backlogs, err := queue.Tenants(ctx, js, s)
	if errors.Is(err, jetstream.ErrStreamNotFound) { // no fleet has run yet: nothing queued
		return rows, nil
	}
	if err != nil {
		return nil, err
	}
	for pair, b := range backlogs {
		r := row(pair.Tenant)
		r.Queued += b.Pending
		r.Running += b.AckPending
	}
	return rows, nil
}

// tenantName is the one NAME a tenant command takes.
func tenantName(pos []string, usage string) (string, error) {
	switch {
	case len(pos) != 1:
		return "", errors.New("usage: " + usage)
	case !job.ValidTenant(pos[0]):
		return "", fmt.Errorf("tenant %q: %w", pos[0], job.ErrInvalidTenant)
	}
	return pos[0], nil
}

// bound prints a policy bound, 0 being none.
func bound(n int64) string {
	if n == 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

// bucketCommand is one command on the tenants bucket (`submit tenant …`, `submit queue …`): the
// flags it adds to the fleet's, the check of what it was given (a usage error, exit 2), and what
// it does with the bucket (an error exits 1).
type bucketCommand struct {
	name, usage string
	create      bool // make the bucket when it is missing
	flags       func(fs *flag.FlagSet, o *options)
	check       func(fs *flag.FlagSet, o options, pos []string) error
	do          func(ctx context.Context, b bucket, o options, stdout, stderr io.Writer) error
}

// run parses args, checks them, opens the bucket and does the command, within 10 s.
func (c bucketCommand) run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := cli.NewFlagSet(c.name, c.usage, stdout)
	listFlags(fs, &o)
	if c.flags != nil {
		c.flags(fs, &o)
	}
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	if err := c.check(fs, o, pos); err != nil {
		return usageFailed(stderr, err)
	}
	b, closeConn, err := tenantsBucket(o, c.create, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.do(ctx, b, o, stdout, stderr); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// policyOf is tenant name's own policy, an error wrapping tenant.ErrNoEntry when it has none.
func policyOf(ctx context.Context, b bucket, name string) (tenant.Policy, error) {
	if b.kv == nil {
		return tenant.Policy{}, fmt.Errorf("tenant %s: %w", name, tenant.ErrNoEntry)
	}
	p, ok, err := tenant.Get(ctx, b.kv, name)
	if err == nil && !ok {
		err = fmt.Errorf("tenant %s: %w", name, tenant.ErrNoEntry)
	}
	return p, err
}

// bucket is the tenants bucket and the JetStream it was opened with; kv is nil when the bucket
// does not exist and was not to be made.
type bucket struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// tenantsBucket connects and opens the tenants bucket of o's prefix, making it when create.
func tenantsBucket(o options, create bool, stderr io.Writer) (bucket, func(), error) {
	c, nc, err := connect(o, stderr)
	if err != nil {
		return bucket{}, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return bucket{}, nil, fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := c.Subjects()
	var kv jetstream.KeyValue
	switch {
	case create:
		// One replica when submit makes it; workers make it with their --stream-replicas.
		kv, err = tenant.EnsureBucket(ctx, js, s, 1)
	default:
		kv, err = js.KeyValue(ctx, s.TenantsBucket())
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = nil, nil
		} else if err != nil {
			err = fmt.Errorf("bucket %s: %w", s.TenantsBucket(), err)
		}
	}
	if err != nil {
		nc.Close()
		return bucket{}, nil, err
	}
	return bucket{js: js, kv: kv}, nc.Close, nil
}
