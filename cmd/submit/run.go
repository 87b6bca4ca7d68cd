package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

// version is set by the build.
var version = "dev"

// Exit codes besides the program's own.
const (
	exitTimedOut = 124
	exitOther    = 125 // rejected, error, expired, cancelled, unknown, or submit's own failure
)

const usage = `usage: submit [flags] [FILE|-] [-- ARGS...]
       submit watch ID
       submit cancel ID
       submit workers
       submit bench [--jobs N] [--concurrency C] [--lang L] [--code CODE]

Sends one job to a runfleet fleet and, by default, waits for it: the program's stdout and stderr
arrive on submit's own as the worker stores them, and submit exits with the program's exit code
(124 when it timed out; 125 when it was rejected, cancelled, expired, or ended in error or
unknown, with one line on stderr saying which and why).

Flags go anywhere on the line; what follows -- is the program's arguments (sys.argv[1:],
process.argv.slice(2)). When submit's standard input is a pipe or a file, it becomes the job's
stdin (unless FILE is -, or --stdin or --stdin-file is given); a terminal is never read.

Ctrl-C while waiting cancels the job and waits for its settlement; a second Ctrl-C leaves the job
running and prints how to watch it. Ctrl-C in submit watch only stops watching (exit 130).

Examples:
  submit --lang python3 --code 'print(6*7)'
  echo 'import sys; sys.exit(3)' | submit --lang python3 -
  submit script.js --env MODE=fast --timeout 5s < input.txt
  submit report.py --file data.csv --label team=ml -- --month 2026-11
  submit --no-wait analysis.py            # prints the job id
  submit watch 6b0f…                      # replay and follow a job
  submit --json --code 'print(1)' --lang python3 | jq .status

The connection flags (--nats-*, --prefix, --queue, --stream-replicas) also read RUNFLEET_<NAME>
from the environment (--nats-url ↔ RUNFLEET_NATS_URL); the job's own flags read nothing from it.

Flags:
`

type options struct {
	conn                                                         cli.NATS
	replicas                                                     int
	prefix, queue                                                string
	lang, code, preload, stdin, stdinFile, id, timeout, deadline string
	outputBytes, memory, pids                                    string
	env, files, labels                                           cli.List
	noWait, json                                                 bool
}

// connectionFlags are the flags that also read RUNFLEET_* (docs/cli.md); the per-job flags read none.
var connectionFlags = slices.Concat(cli.NATSFlags, []string{"prefix", "queue", "stream-replicas"})

func commonFlags(fs *flag.FlagSet, o *options) {
	o.conn.Register(fs)
	fs.StringVar(&o.prefix, "prefix", job.DefaultPrefix, "subject and stream prefix of the fleet")
	fs.StringVar(&o.queue, "queue", job.DefaultQueue, "queue to submit to")
	fs.IntVar(&o.replicas, "stream-replicas", 1, "JetStream replicas of the streams when submit creates or raises them")
}

// runFlags is the flag set of `submit [flags] FILE`: the connection, the job, and what to do
// once it is stored. A feature with flags of its own adds them here.
func runFlags(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	commonFlags(fs, o)
	jobFlags(fs, o)
	fs.BoolVar(&o.noWait, "no-wait", false, "print the job id and exit 0 once the job is stored")
	fs.BoolVar(&o.json, "json", false, "print the settlement as JSON instead of the output")
	return fs
}

func jobFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.lang, "lang", "", "profile name (python3, nodejs); guessed from FILE's extension")
	fs.StringVar(&o.code, "code", "", "the code as a string, instead of FILE")
	fs.StringVar(&o.preload, "preload", "", "code run first, in the same scope as the program")
	fs.StringVar(&o.stdin, "stdin", "", "what the program reads on its standard input")
	fs.StringVar(&o.stdinFile, "stdin-file", "", "a file the program reads on its standard input")
	fs.Var(&o.env, "env", "K=V: an environment variable of the program (repeatable)")
	fs.Var(&o.files, "file", "SRC[:DEST]: a file written under /workspace, with SRC's mode, before the code runs (repeatable)")
	fs.Var(&o.labels, "label", "K=V: a label every settlement of the job carries (repeatable)")
	fs.StringVar(&o.timeout, "timeout", "", "wall-clock limit, e.g. 10s (default: the worker's)")
	fs.StringVar(&o.outputBytes, "output-bytes", "", "limit of stdout and stderr together, e.g. 1m")
	fs.StringVar(&o.memory, "memory", "", "memory limit, e.g. 256m")
	fs.StringVar(&o.pids, "pids", "", "process limit")
	fs.StringVar(&o.deadline, "deadline", "", "latest start: an RFC 3339 time or a duration from now (e.g. 10m); later, the job settles expired")
	fs.StringVar(&o.id, "id", "", "job id (default: a new UUID)")
}

func run(sigs <-chan os.Signal, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "watch", "cancel", "workers", "bench":
			return subcommand(sigs, args[0], args[1:], getenv, stdout, stderr)
		case "artifacts":
			return artifactsCommand(args[1:], getenv, stderr)
		}
	}
	var o options
	fs := runFlags(&o, stderr)
	var arts artifactFlags
	arts.register(fs)
	files, progArgs, err := cli.ParseInterspersed(fs, args, getenv, connectionFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	req, err := buildRequest(&o, given, files, progArgs, stdin)
	if err != nil {
		return fail(stderr, err)
	}
	req.Outputs = arts.outputs
	c, nc, err := connect(o)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sub, err := c.Submit(ctx, o.queue, req, nil)
	cancel()
	if err != nil {
		return fail(stderr, err)
	}
	if sub.Duplicate {
		fmt.Fprintf(stderr, "submit: job %s was already submitted; following it\n", sub.ID)
	}
	if o.noWait {
		fmt.Fprintln(stdout, sub.ID)
		return 0
	}
	return arts.after(c, sub.ID, follow(sigs, c, sub.ID, o.json, false, stdout, stderr), stderr)
}

// parseFailed reports a command line that did not parse, --help or --version, and returns the
// exit code: 0 for the last two, submit's own 125 otherwise.
func parseFailed(stdout, stderr io.Writer, err error) int {
	if cli.Exit(stdout, stderr, "submit", version, err) == 0 {
		return 0
	}
	return exitOther
}

// connect returns a client and its connection; the caller closes the connection.
func connect(o options) (*runfleet.Client, *nats.Conn, error) {
	nc, err := o.conn.Connect("runfleet-submit")
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is a worker --dev or nats-server running?)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: o.prefix, Streams: runfleet.StreamOptions{Replicas: o.replicas}})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// fail reports err in one line and returns the exit code of submit's own failures.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "submit:", err)
	return exitOther
}

// exitDetached is submit watch's exit code after Ctrl-C: 128 + SIGINT, what a shell reports
// for docker logs -f or tail -f stopped the same way.
const exitDetached = 130

// follow streams job id's pages and returns the exit code its settlement calls for. On Ctrl-C
// it cancels the job and waits for its settlement (a second Ctrl-C leaves the job running); with
// detach (submit watch, which did not start the job) it only stops watching.
func follow(sigs <-chan os.Signal, c *runfleet.Client, id string, asJSON, detach bool, stdout, stderr io.Writer) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	var detached atomic.Bool
	wg.Go(func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		if detach {
			detached.Store(true)
			stop()
			return
		}
		fmt.Fprintf(stderr, "submit: cancelling job %s (Ctrl-C again to leave it running)\n", id)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.Cancel(cctx, id); err != nil {
			fmt.Fprintln(stderr, "submit:", describe(id, err))
		}
		cancel()
		select {
		case <-sigs:
			fmt.Fprintf(stderr, "submit: left job %s running; follow it with: submit watch %s\n", id, id)
			stop()
		case <-done:
		}
	})
	st, err := c.Watch(ctx, id, func(p runfleet.Page) error {
		if asJSON {
			return nil
		}
		w := stdout
		if p.Stream == job.Stderr {
			w = stderr
		}
		_, err := w.Write(p.Data)
		return err
	})
	switch {
	case detached.Load() && errors.Is(err, runfleet.ErrNoSettlement):
		fmt.Fprintf(stderr, "submit: stopped watching job %s; it goes on\n", id)
		return exitDetached
	case errors.Is(err, runfleet.ErrNoSettlement):
		return exitOther
	case err != nil:
		return fail(stderr, describe(id, err))
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	}
	return exitCode(st, stderr)
}

// describe says in words what a lookup of job id found, for the errors a user meets.
func describe(id string, err error) error {
	switch {
	case errors.Is(err, runfleet.ErrNotFound):
		return fmt.Errorf("no job %s: the fleet holds nothing of it (never submitted, or settled and long expired)", id)
	case errors.Is(err, runfleet.ErrExpired):
		return fmt.Errorf("job %s settled and its results have expired", id)
	case errors.Is(err, runfleet.ErrSettled):
		return fmt.Errorf("job %s has already settled; nothing to cancel", id)
	}
	return err
}

func exitCode(st job.Settlement, stderr io.Writer) int {
	why := string(st.Status)
	if st.Reason != "" {
		why += ": " + string(st.Reason)
	}
	if st.Detail != "" {
		why += " (" + st.Detail + ")"
	}
	switch st.Status {
	case job.StatusSucceeded:
		return 0
	case job.StatusFailed:
		if st.Reason != job.ReasonExitNonzero {
			fmt.Fprintf(stderr, "submit: job %s %s\n", st.JobID, why)
		}
		if st.ExitCode != nil && *st.ExitCode != 0 {
			return *st.ExitCode
		}
		return 1
	case job.StatusTimedOut:
		fmt.Fprintf(stderr, "submit: job %s timed out\n", st.JobID)
		return exitTimedOut
	default:
		fmt.Fprintf(stderr, "submit: job %s %s\n", st.JobID, why)
		return exitOther
	}
}
