package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

const redriveUsage = `usage: submit redrive ID [--may-have-run] [--no-wait] [flags]
       submit redrive --status S [--queue Q] [--tenant T] [--since D] [--until D] [--dry-run] [--rate N] [--may-have-run] [flags]

Runs settled job ID again: its stored request is published as a new job (redrive_of ID), whose id
is printed; then submit follows it as a plain submit does, unless --no-wait. Calling it again
returns the same new job. A job that settled unknown may have run: it needs --may-have-run.

With a filter instead of an ID, redrives every job it selects, --rate a second, on one of the
fleet's workers, printing progress; --dry-run prints how many it selects and starts nothing.
Ctrl-C stops the run (the jobs published so far stay).

Flags:
`

// redriveCommand is `submit redrive`.
func redriveCommand(sigs <-chan os.Signal, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	var f filterFlags
	fs := cli.NewFlagSet("submit redrive", redriveUsage, stdout)
	listFlags(fs, &o)
	f.register(fs)
	outputFlags(fs, &o)
	mayHaveRun := fs.Bool("may-have-run", false, "also redrive jobs that settled unknown, whose code may have run")
	fs.BoolVar(&o.noWait, "no-wait", false, "print the new job's id and exit without following it")
	dryRun := fs.Bool("dry-run", false, "bulk: print how many jobs the filter selects, redrive none")
	rate := fs.Float64("rate", job.DefaultRedriveRate, "bulk: jobs redriven a second")
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, fleetFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	filtered := f != filterFlags{}
	q, err := f.query(time.Now())
	switch {
	case len(pos) > 1 || (len(pos) == 1) == filtered:
		err = errors.New("usage: submit redrive ID, or submit redrive --status S [filters]")
	case filtered && f.status == "":
		// Without a status a bulk run would select succeeded jobs too, count them in a dry run, and skip them.
		err = errors.New("a bulk redrive needs --status (unknown, error, failed, timed_out, cancelled, expired)")
	case len(pos) == 1 && !job.ValidID(pos[0]):
		err = fmt.Errorf("%q: %w", pos[0], job.ErrInvalidID)
	case *rate <= 0:
		err = fmt.Errorf("--rate %v: want more than 0", *rate)
	case o.json && o.events:
		err = errors.New("give --json or --events, not both")
	}
	if err != nil {
		return usageFailed(stderr, err)
	}
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	if !filtered {
		return redriveOne(sigs, c, pos[0], *mayHaveRun, o, stdout, stderr)
	}
	b := job.BulkRedrive{Status: q.Status, Queue: q.Queue, Tenant: q.Tenant, Since: q.Since, Until: q.Until,
		RatePerS: *rate, ConfirmMayHaveRun: *mayHaveRun, DryRun: *dryRun}
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{Prefix: o.prefix})
	if err != nil {
		return fail(stderr, err)
	}
	return redriveMany(sigs, in, b, stdout, stderr)
}

func redriveOne(sigs <-chan os.Signal, c *runfleet.Client, id string, mayHaveRun bool, o options, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := c.Redrive(ctx, id, &runfleet.RedriveOptions{ConfirmMayHaveRun: mayHaveRun})
	cancel()
	switch {
	case errors.Is(err, runfleet.ErrMayHaveRun):
		return fail(stderr, fmt.Errorf("job %s settled unknown: its code may have run; redrive it with --may-have-run", id))
	case errors.Is(err, runfleet.ErrNoSettlement):
		return fail(stderr, fmt.Errorf("job %s has not settled; nothing to redrive yet", id))
	case errors.Is(err, runfleet.ErrNoService):
		return fail(stderr, fmt.Errorf("%w (is a worker running?)", err))
	case err != nil:
		return fail(stderr, describe(id, err))
	}
	if out.Duplicate {
		fmt.Fprintf(stderr, "submit: job %s was already redriven as %s\n", id, out.JobID)
	} else {
		fmt.Fprintf(stderr, "submit: job %s redriven as %s\n", id, out.JobID)
	}
	if o.noWait {
		fmt.Fprintln(stdout, out.JobID)
		return 0
	}
	return follow(sigs, c, out.JobID, o.mode(), false, stdout, stderr)
}

// redriveMany starts a bulk run and prints its progress until it ends; the first interrupt stops it.
func redriveMany(sigs <-chan os.Signal, in *runfleet.Inspector, b job.BulkRedrive, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	run, err := in.StartRedrive(ctx, b)
	cancel()
	if err != nil {
		return fail(stderr, err)
	}
	if b.DryRun {
		fmt.Fprintln(stdout, run.Total)
		return 0
	}
	fmt.Fprintf(stderr, "submit: redrive run %s: %d jobs at %v a second\n", run.ID, run.Total, b.RatePerS)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	interrupted := false
	for run.State == job.RunRunning {
		select {
		case <-sigs:
			if interrupted {
				fmt.Fprintf(stderr, "submit: stopped waiting; run %s was asked to stop\n", run.ID)
				return exitInterrupted
			}
			interrupted = true
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := in.StopRedrive(ctx, run.ID)
			cancel()
			if err != nil {
				return fail(stderr, err)
			}
			fmt.Fprintf(stderr, "submit: stopping run %s\n", run.ID)
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		next, err := in.RedriveRun(ctx, run.ID)
		cancel()
		if err != nil {
			return fail(stderr, err)
		}
		run = next
		fmt.Fprintf(stderr, "submit: %d/%d redriven, %d skipped, %d failed\n", run.Redriven, run.Total, run.Skipped, run.Failed)
	}
	fmt.Fprintf(stdout, "%s: %d redriven, %d skipped, %d failed of %d\n", run.State, run.Redriven, run.Skipped, run.Failed, run.Total)
	switch {
	case interrupted:
		return exitInterrupted
	case run.State != job.RunDone || run.Failed > 0:
		return exitOther
	}
	return 0
}
