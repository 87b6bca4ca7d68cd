package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

const jobsUsage = `usage: submit jobs [--status S] [--queue Q] [--tenant T] [--since D] [--until D] [--limit N] [--json] [flags]

Lists settled jobs, newest first, one line each: id, status, reason, queue, tenant, settled at,
cpu_ms. --since and --until take an RFC 3339 time or a duration ago (1h). --json prints one JSON
object a line. Every job whose record the fleet keeps is listed; --limit 0 lists them all.

Flags:
`

// filterFlags are the list filter of submit jobs and of a bulk submit redrive.
type filterFlags struct {
	status, queue, tenant, since, until string
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.status, "status", "", "only jobs of this status (unknown, error, failed, timed_out, cancelled, expired, rejected, succeeded)")
	fs.StringVar(&f.queue, "queue", "", "only jobs of this queue")
	fs.StringVar(&f.tenant, "tenant", "", "only jobs of this tenant")
	fs.StringVar(&f.since, "since", "", "only jobs settled since: an RFC 3339 time or a duration ago (1h)")
	fs.StringVar(&f.until, "until", "", "only jobs settled before: an RFC 3339 time or a duration ago")
}

func (f *filterFlags) query(now time.Time) (job.ListQuery, error) {
	q := job.ListQuery{Status: job.Status(f.status), Queue: f.queue, Tenant: f.tenant}
	var err error
	if f.since != "" {
		if q.Since, err = job.ParseTime(f.since, now); err != nil {
			return q, fmt.Errorf("--since: %w", err)
		}
	}
	if f.until != "" {
		if q.Until, err = job.ParseTime(f.until, now); err != nil {
			return q, fmt.Errorf("--until: %w", err)
		}
	}
	return q, q.Validate()
}

// listFlags registers the connection flags a listing command needs: no --queue, which is a filter here.
func listFlags(fs *flag.FlagSet, o *options) {
	o.conn.Register(fs)
	fs.StringVar(&o.prefix, "prefix", job.DefaultPrefix, "subject and stream prefix of the fleet")
}

// jobsCommand is `submit jobs`.
func jobsCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	var f filterFlags
	fs := cli.NewFlagSet("submit jobs", jobsUsage, stdout)
	listFlags(fs, &o)
	f.register(fs)
	limit := fs.Int("limit", 100, "jobs to list at most; 0 lists every one")
	fs.BoolVar(&o.json, "json", false, "print NDJSON, one job a line")
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	q, err := f.query(time.Now())
	switch {
	case len(pos) > 0:
		err = fmt.Errorf("submit jobs takes no arguments, got %q", pos)
	case *limit < 0:
		err = fmt.Errorf("--limit %d: want 0 or more", *limit)
	}
	if err != nil {
		return usageFailed(stderr, err)
	}
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	var tw *tabwriter.Writer
	if !o.json {
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATUS\tREASON\tQUEUE\tTENANT\tSETTLED\tCPU_MS")
	}
	enc := json.NewEncoder(stdout)
	err = eachListed(c, q, *limit, func(l job.Listed) error {
		if o.json {
			return enc.Encode(l)
		}
		cpu := "-"
		if l.CPUMS != nil {
			cpu = strconv.FormatInt(*l.CPUMS, 10)
		}
		_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.JobID, l.Status, cmpDash(string(l.Reason)),
			l.Queue, l.Tenant, l.SettledAt.Local().Format(time.DateTime), cpu)
		return err
	})
	if tw != nil {
		tw.Flush()
	}
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// eachListed calls fn for up to limit jobs q selects (every one when limit is 0), page by page.
func eachListed(c *runfleet.Client, q job.ListQuery, limit int, fn func(job.Listed) error) error {
	for n := 0; ; {
		q.Limit = job.MaxListLimit
		if limit > 0 {
			q.Limit = min(limit-n, job.MaxListLimit)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := c.ListJobs(ctx, q)
		cancel()
		if errors.Is(err, runfleet.ErrNoService) {
			return fmt.Errorf("%w (is a worker running?)", err)
		}
		if err != nil {
			return err
		}
		for _, l := range page.Jobs {
			if err := fn(l); err != nil {
				return err
			}
		}
		n += len(page.Jobs)
		if page.Cursor == "" || (limit > 0 && n >= limit) {
			return nil
		}
		q.Cursor = page.Cursor
	}
}

func cmpDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const showUsage = `usage: submit show ID [--request] [flags]

Prints job ID's settlement as JSON and, with --request, then the request it was stored with (as
{"queue","tenant","request"}).

Flags:
`

// showCommand is `submit show ID`.
func showCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := cli.NewFlagSet("submit show", showUsage, stdout)
	listFlags(fs, &o)
	withRequest := fs.Bool("request", false, "also print the stored request (code, files, env)")
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	switch {
	case len(pos) != 1:
		return usageFailed(stderr, errors.New("usage: submit show ID [--request]"))
	case !job.ValidID(pos[0]):
		return usageFailed(stderr, fmt.Errorf("%q: %w", pos[0], job.ErrInvalidID))
	}
	id := pos[0]
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	raw, err := c.SettlementJSON(ctx, id)
	unsettled := errors.Is(err, runfleet.ErrNoSettlement)
	switch {
	case unsettled:
		fmt.Fprintf(stderr, "submit: job %s has not settled\n", id)
	case err != nil:
		return fail(stderr, describe(id, err))
	default:
		if err := enc.Encode(raw); err != nil {
			return fail(stderr, err)
		}
	}
	if *withRequest {
		req, err := c.Request(ctx, id)
		if err != nil {
			return fail(stderr, describe(id, err))
		}
		stored := struct {
			Queue   string          `json:"queue"`
			Tenant  string          `json:"tenant"`
			Request json.RawMessage `json:"request"`
		}{req.Queue, req.Tenant, req.Body}
		if err := enc.Encode(stored); err != nil {
			return fail(stderr, err)
		}
	}
	if unsettled {
		return exitOther
	}
	return 0
}
