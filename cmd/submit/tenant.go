package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/internal/queue"
	"github.com/runfleet/runfleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
)

const tenantUsage = `usage: submit tenant set NAME [--max-queued N] [--max-running N] [--weight W] [flags]
       submit tenant key add NAME [flags]
       submit tenant show [NAME] [--json] [flags]

Tenants' policies, kept in the fleet's KV bucket RUNFLEET_TENANTS (docs/protocol.md, "Tenants");
workers and gateways apply a change within 5 s. set changes only the bounds given and keeps the
rest (and the keys); 0 means no bound. key add prints a new API key for the gateway once and
stores only its SHA-256. show lists each policy with the tenant's jobs queued and running now.
Each subcommand answers --help with its own flags.
`

// tenantCommand is `submit tenant ...`.
func tenantCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && args[0] == "set":
		return tenantSet(args[1:], getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "show":
		return tenantShow(args[1:], getenv, stdout, stderr)
	case len(args) > 1 && args[0] == "key" && args[1] == "add":
		return tenantKeyAdd(args[2:], getenv, stdout, stderr)
	case len(args) > 0 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h"):
		fmt.Fprint(stdout, tenantUsage)
		return 0
	}
	cli.Fail(stderr, "submit tenant", errors.New("want set, key add or show"))
	return exitOther
}

const tenantSetUsage = `usage: submit tenant set NAME [--max-queued N] [--max-running N] [--weight W] [flags]

Writes tenant NAME's policy: only the bounds given change, the others and the tenant's keys are
kept; a tenant without an entry gets one. 0 means no bound (and weight 1). The bucket is made
when it is missing.

Flags:
`

// tenantSet is `submit tenant set NAME`.
func tenantSet(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet("submit tenant set", tenantSetUsage, stdout)
	listFlags(fs, &o)
	var p tenant.Policy
	fs.Int64Var(&p.MaxQueued, "max-queued", 0, "jobs of the tenant stored and not yet started, at most (0: no bound)")
	fs.Int64Var(&p.MaxRunning, "max-running", 0, "jobs of the tenant holding a sandbox at once across the fleet, at most (0: no bound)")
	fs.Float64Var(&p.Weight, "weight", 0, fmt.Sprintf("share of the fleet's CPU time among tenants with jobs waiting, 0 to %d (0: 1)", tenant.MaxWeight))
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	name, err := tenantName(pos, "submit tenant set NAME [--max-queued N] [--max-running N] [--weight W]")
	if err == nil {
		err = p.Validate()
	}
	if err != nil {
		cli.Fail(stderr, "submit", err)
		return exitOther
	}
	b, closeConn, err := tenantsBucket(o, true, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	})
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stdout, "tenant %s: max_queued %s, max_running %s, weight %s, %d keys\n", name,
		bound(got.MaxQueued), bound(got.MaxRunning), strconv.FormatFloat(got.EffectiveWeight(), 'g', -1, 64), len(got.APIKeysSHA256))
	return 0
}

const tenantKeyUsage = `usage: submit tenant key add NAME [flags]

Makes a new random API key for tenant NAME and prints it on standard output, this once: only its
SHA-256 is stored, in the tenant's policy (made when it has none). The gateway files a job sent
with the key under the tenant.

Flags:
`

// tenantKeyAdd is `submit tenant key add NAME`.
func tenantKeyAdd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet("submit tenant key add", tenantKeyUsage, stdout)
	listFlags(fs, &o)
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	name, err := tenantName(pos, "submit tenant key add NAME")
	if err != nil {
		cli.Fail(stderr, "submit", err)
		return exitOther
	}
	b, closeConn, err := tenantsBucket(o, true, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := tenant.NewKey()
	digest := tenant.HashKey(key)
	if _, err := tenant.Update(ctx, b.kv, name, func(p *tenant.Policy) {
		if !slices.Contains(p.APIKeysSHA256, digest) { // the CAS loop may call this again
			p.APIKeysSHA256 = append(p.APIKeysSHA256, digest)
		}
	}); err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintln(stdout, key)
	fmt.Fprintf(stderr, "submit: a new key of tenant %s; only its SHA-256 is stored, so keep it now\n", name)
	return 0
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
	MaxQueued  int64   `json:"max_queued"`
	MaxRunning int64   `json:"max_running"`
	Weight     float64 `json:"weight"`
	APIKeys    int     `json:"api_keys"`
}

// tenantShow is `submit tenant show [NAME]`.
func tenantShow(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet("submit tenant show", tenantShowUsage, stdout)
	listFlags(fs, &o)
	fs.BoolVar(&o.json, "json", false, "print NDJSON, one tenant a line")
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	only := ""
	switch {
	case len(pos) > 1:
		err = fmt.Errorf("usage: submit tenant show [NAME], got %q", pos)
	case len(pos) == 1 && !job.ValidTenant(pos[0]):
		err = fmt.Errorf("tenant %q: %w", pos[0], job.ErrInvalidTenant)
	case len(pos) == 1:
		only = pos[0]
	}
	if err != nil {
		cli.Fail(stderr, "submit", err)
		return exitOther
	}
	s, err := job.NewSubjects(o.prefix)
	if err != nil {
		cli.Fail(stderr, "submit", err)
		return exitOther
	}
	b, closeConn, err := tenantsBucket(o, false, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := tenantRows(ctx, b.js, b.kv, s, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	if only != "" {
		row, ok := rows[only]
		if !ok {
			row = &tenantRow{Tenant: only}
		}
		rows = map[string]*tenantRow{only: row}
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	slices.Sort(names)
	if o.json {
		enc := json.NewEncoder(stdout)
		for _, n := range names {
			if err := enc.Encode(rows[n]); err != nil {
				return fail(stderr, err)
			}
		}
		return 0
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
	if err := tw.Flush(); err != nil {
		return fail(stderr, err)
	}
	return 0
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
			p, err := tenant.Decode(e.Value())
			if err != nil { // workers treat it as no entry; say why it shows as none
				fmt.Fprintf(stderr, "submit: tenant %s: %v\n", e.Key(), err)
				row(e.Key())
				continue
			}
			row(e.Key()).Policy = &policyRow{MaxQueued: p.MaxQueued, MaxRunning: p.MaxRunning, Weight: p.Weight, APIKeys: len(p.APIKeysSHA256)}
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
