package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// Exit codes besides the program's own.
const (
	exitTimedOut    = 124
	exitQueueFull   = 75            // EX_TEMPFAIL: the tenant's max_queued or a storage bound is reached, nothing was stored
	exitOther       = 125           // rejected, error, expired, cancelled, unknown, or submit's own failure
	exitUsage       = cli.ExitUsage // a command line submit cannot read: nothing was connected or stored
	exitInterrupted = 130           // 128 + SIGINT: Ctrl-C, SIGTERM, SIGHUP or a closed standard output
)

const usage = `usage: submit [flags] [FILE|-] [-- ARGS...]
       submit watch ID
       submit cancel ID
       submit artifacts ID [DIR]
       submit jobs [--status S] [--queue Q] [--tenant T] [--since D] [--until D] [--limit N] [--json]
       submit show ID [--request]
       submit redrive ID [--may-have-run] [--no-wait] | submit redrive --status S [filters] [--dry-run] [--rate N]
       submit tenant set NAME [--max-queued N] [--max-running N] [--weight W]
       submit tenant key add|list NAME | submit tenant key remove NAME DIGEST-PREFIX
       submit tenant delete NAME [--force] | submit tenant rotate-session-secret
       submit tenant show [NAME] [--json]
       submit workers
       submit bench [--jobs N] [--concurrency C] [--lang L] [--code CODE]
       submit completion bash|zsh|fish
Each subcommand answers --help with its own flags; submit's flags may also come before its name
(submit --nats-url URL workers).

Sends one job to a runfleet fleet and, by default, waits for it: the program's stdout and stderr
arrive on submit's own as the worker stores them, and submit exits with the program's exit code
(124 when it timed out; 125 when it was rejected, cancelled, expired, or ended in error or
unknown, with one line on stderr saying which and why; 130 when interrupted; 75 when the
tenant's max_queued is reached and nothing was stored; 2 for a command line submit cannot read,
nothing stored). A job may exit with any of these itself: --events or --json tell how it ended.

Flags go anywhere on the line; what follows -- is the program's arguments (sys.argv[1:],
process.argv.slice(2)). When submit's standard input is a pipe or a file, it becomes the job's
stdin (unless FILE is -, or --stdin or --stdin-file is given); a terminal is never read.

Ctrl-C while waiting cancels the job and waits for its settlement (at most 10 s), then exits
130; a second Ctrl-C stops waiting at once (the cancel stands). SIGTERM, SIGHUP and a closed
standard output do the same as Ctrl-C. On a terminal, a job with no output after 5 s gets one
line saying where it waits.

Sizes (--memory, --output-bytes): bytes, or k, m, g (KiB, MiB, GiB: powers of 1024), e.g. 256m.

--output keeps files as artifacts; once the job settled they are downloaded into --artifacts DIR
(default ./<job id>/), created when missing. Writes stay inside DIR, a .git path is refused, and an
existing file is never replaced unless --force.

Examples:
  submit --lang python3 --code 'print(6*7)'
  echo 'import sys; sys.exit(3)' | submit --lang python3 -
  submit script.js --env MODE=fast --timeout 5s < input.txt
  submit report.py --file data.csv --label team=ml -- --month 2026-11
  submit plot.py --output 'out/*.png'         # downloads into ./<job id>/out/
  submit --no-wait analysis.py                # prints the job id
  submit watch 6b0f…                          # replay and follow a job
  submit --json --code 'print(1)' --lang python3 | jq .status
  submit --events --code 'print(1)' --lang python3 | jq -c .

The connection flags (--nats-*, --prefix, --queue, --tenant) also read RUNFLEET_<NAME>
from the environment (--nats-url ↔ RUNFLEET_NATS_URL); the job's own flags read nothing from it.

Flags:
`

type options struct {
	conn                                                         cli.NATS
	ensureStreams                                                bool
	prefix, queue, tenant                                        string
	lang, code, preload, stdin, stdinFile, id, timeout, deadline string
	outputBytes, memory, pids                                    string
	env, files, labels                                           cli.List
	noWait, json, events, noQueueCheck                           bool
}

// mode is how a followed job reaches standard output.
type mode int

const (
	plain    mode = iota // its stdout and stderr on submit's own
	asJSON               // the settlement only, as JSON
	asEvents             // NDJSON: each page, then the settlement
)

func (o *options) mode() mode {
	switch {
	case o.events:
		return asEvents
	case o.json:
		return asJSON
	}
	return plain
}

// connectionFlags are the flags that also read RUNFLEET_* (docs/cli.md); the per-job flags read none.
var connectionFlags = slices.Concat(cli.NATSFlags, []string{"prefix", "queue", "tenant"})

// fleetFlags are the flags that read RUNFLEET_* in the commands that look at the fleet rather than
// publish to it (jobs, show, redrive, tenant): there --queue and --tenant, when they exist, are
// filters or the tenant changed, and RUNFLEET_QUEUE or RUNFLEET_TENANT (the submitter's own) must
// not narrow them.
var fleetFlags = slices.Concat(cli.NATSFlags, []string{"prefix"})

func commonFlags(fs *flag.FlagSet, o *options) {
	o.conn.Register(fs)
	fs.StringVar(&o.prefix, "prefix", job.DefaultPrefix, "subject and stream prefix of the fleet")
	fs.StringVar(&o.queue, "queue", job.DefaultQueue, "queue to submit to")
	fs.StringVar(&o.tenant, "tenant", job.DefaultTenant, "tenant of the jobs submit publishes")
	fs.BoolVar(&o.ensureStreams, "ensure-streams", false, "create the fleet's streams when they are missing (needs the permission to manage them; the workers do it)")
}

// runFlags is the flag set of `submit [flags] FILE`: the connection, the job, and what to do
// once it is stored. A feature with flags of its own adds them here.
func runFlags(o *options, stdout io.Writer) *flag.FlagSet {
	fs := cli.NewFlagSet("submit", usage, stdout)
	commonFlags(fs, o)
	jobFlags(fs, o)
	fs.BoolVar(&o.noWait, "no-wait", false, "print the job id and exit 0 once the job is stored")
	fs.BoolVar(&o.noQueueCheck, "no-queue-check", false, "skip the check of the tenant's max_queued (for a NATS user not allowed to read it)")
	outputFlags(fs, o)
	return fs
}

// outputFlags are how a followed job is printed (submit and submit watch).
func outputFlags(fs *flag.FlagSet, o *options) {
	fs.BoolVar(&o.json, "json", false, "print the settlement as JSON instead of the output")
	fs.BoolVar(&o.events, "events", false, `print NDJSON: a line per page ({"type":"page",...}), then {"type":"settlement",...}`)
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
	fs.StringVar(&o.outputBytes, "output-bytes", "", "limit of stdout and stderr together, a size: 64k, 1m, 1MiB")
	fs.StringVar(&o.memory, "memory", "", "memory limit, a size: 256m, 256MiB, 1g")
	fs.StringVar(&o.pids, "pids", "", "process limit")
	fs.StringVar(&o.deadline, "deadline", "", "latest start: an RFC 3339 time or a duration from now (e.g. 10m); later, the job settles expired")
	fs.StringVar(&o.id, "id", "", "job id (default: a new UUID)")
}

// subcommands are the names that, first on the line or after submit's own flags, select a
// subcommand rather than name a FILE (./workers is the file).
var subcommands = []string{"watch", "cancel", "workers", "bench", "artifacts", "jobs", "show", "redrive", "tenant", "queue", "completion"}

func run(sigs <-chan os.Signal, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if name, global, rest, ok := splitSubcommand(args); ok {
		// The flags before the name are the subcommand's, as if given after it.
		args := slices.Concat(global, rest)
		switch name {
		case "watch", "cancel", "workers", "bench":
			return subcommand(sigs, name, args, getenv, stdout, stderr)
		case "artifacts":
			return artifactsCommand(args, getenv, stdout, stderr)
		case "jobs":
			return jobsCommand(args, getenv, stdout, stderr)
		case "show":
			return showCommand(args, getenv, stdout, stderr)
		case "redrive":
			return redriveCommand(sigs, args, getenv, stdout, stderr)
		case "tenant":
			return tenantCommand(global, rest, getenv, stdout, stderr)
		case "queue":
			return queueCommand(global, rest, getenv, stdout, stderr)
		case "completion":
			return completionCommand(args, stdout, stderr)
		}
	}
	var o options
	fs := runFlags(&o, stdout)
	var arts artifactFlags
	arts.register(fs)
	files, progArgs, err := cli.ParseInterspersed(fs, args, getenv, connectionFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if o.json && o.events {
		return usageFailed(stderr, errors.New("give --json or --events, not both"))
	}
	req, err := buildRequest(&o, given, files, progArgs, stdin)
	var usageErr *cli.UsageError
	switch {
	case errors.As(err, &usageErr):
		return usageFailed(stderr, err)
	case err != nil:
		return fail(stderr, err)
	}
	req.Outputs = arts.outputs
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	if interrupted(sigs) { // before anything is stored: nothing to cancel
		return exitInterrupted
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sub, err := c.Submit(ctx, o.queue, req, nil)
	cancel()
	var full *runfleet.QueueFullError
	var storage *protocol.StorageFullError
	switch {
	case errors.As(err, &full):
		fmt.Fprintf(stderr, "submit: tenant %s has %d jobs queued, its max_queued is %d: nothing was stored; retry later\n", full.Tenant, full.Queued, full.MaxQueued)
		return exitQueueFull
	case errors.As(err, &storage):
		fmt.Fprintf(stderr, "submit: tenant %s holds %d of its %s %d: nothing was stored; retry later\n", storage.Tenant, storage.Used, storage.Bound, storage.Limit)
		return exitQueueFull
	case errors.Is(err, runfleet.ErrUnknownQueue):
		fmt.Fprintf(stderr, "submit: %v: nothing was stored\n", err)
		return exitOther
	case err != nil:
		// A publish the server refused for the user's permissions is a timeout to the
		// client; the server said why on the connection.
		if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) {
			err = fmt.Errorf("%w (the NATS server said: %v)", err, last)
		}
		return fail(stderr, err)
	}
	if sub.Duplicate {
		fmt.Fprintf(stderr, "submit: job %s was already submitted; following it\n", sub.ID)
	}
	if o.noWait {
		fmt.Fprintln(stdout, sub.ID)
		return 0
	}
	code := follow(sigs, c, sub.ID, o.mode(), false, stdout, stderr)
	if code == exitInterrupted {
		return code
	}
	return arts.after(c, sub.ID, code, stderr)
}

// splitSubcommand finds a subcommand's name after the flags of submit that come before it
// (`submit --nats-url URL workers`): global are those flags, rest what follows the name. A flag
// submit does not know, or a --, ends the search: the line is then submit's own.
func splitSubcommand(args []string) (name string, global, rest []string, ok bool) {
	fs := runFlags(&options{}, io.Discard)
	(&artifactFlags{}).register(fs)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if slices.Contains(subcommands, a) {
			return a, args[:i], args[i+1:], true
		}
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return "", nil, nil, false
		}
		flagName, _, withValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(flagName)
		if f == nil {
			return "", nil, nil, false
		}
		if b, isBool := f.Value.(interface{ IsBoolFlag() bool }); !withValue && !(isBool && b.IsBoolFlag()) {
			i++ // the flag's value
		}
	}
	return "", nil, nil, false
}

// interrupted says whether a signal came while submit was getting ready.
func interrupted(sigs <-chan os.Signal) bool {
	select {
	case s := <-sigs:
		return s != syscall.SIGPIPE
	default:
		return false
	}
}

// parseFailed reports a command line that did not parse, --help or --version, and returns the
// exit code: 0 for the last two, exitUsage for a flag submit cannot read, and submit's own 125
// for a bad value in the environment.
func parseFailed(stdout, stderr io.Writer, err error) int {
	switch code := cli.Exit(stdout, stderr, "submit", err); code {
	case 0, exitUsage:
		return code
	}
	return exitOther
}

// connect returns a client and its connection; the caller closes the connection. A connection
// lost later is retried until it is back, saying so on stderr: a waiting submit would otherwise
// hang silently.
func connect(o options, stderr io.Writer) (*runfleet.Client, *nats.Conn, error) {
	nc, err := o.conn.Connect("runfleet-submit", nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				fmt.Fprintf(stderr, "submit: lost the connection to NATS (%v); retrying until it is back (Ctrl-C stops)\n", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			fmt.Fprintf(stderr, "submit: reconnected to NATS at %s\n", nc.ConnectedUrl())
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is a worker --dev or nats-server running?)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: o.prefix, Tenant: o.tenant, SkipQueueCheck: o.noQueueCheck})
	if err == nil && o.ensureStreams {
		err = ensureStreams(ctx, nc, o.prefix)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// ensureStreams creates the fleet's streams that are missing, with their defaults.
func ensureStreams(ctx context.Context, nc *nats.Conn, prefix string) error {
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{Prefix: prefix})
	if err != nil {
		return err
	}
	return in.EnsureStreams(ctx, protocol.StreamOptions{})
}

// fail reports err in one line and returns the exit code of submit's own failures.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "submit:", err)
	return exitOther
}

// cancelWait bounds the wait for a settlement once a signal cancelled the job: a job that no
// worker has claimed (a queue nobody serves) settles only when one does, and `timeout 8 submit`
// sends its SIGTERM once.
const cancelWait = 10 * time.Second

// statusAfter is how long a job may wait for its first output before submit, on a terminal, says
// in one line what it waits for.
const statusAfter = 5 * time.Second

// follow streams job id's pages and returns the exit code its settlement calls for. The first
// Ctrl-C, SIGTERM, SIGHUP or failed write to stdout cancels the job and waits for its settlement,
// at most cancelWait (detach, for submit watch, which did not start the job: only stops
// watching); a second stops waiting at once. Either way it returns exitInterrupted.
func follow(sigs <-chan os.Signal, c *runfleet.Client, id string, m mode, detach bool, stdout, stderr io.Writer) int {
	ctx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	out := &pages{mode: m, stdout: stdout, stderr: stderr, closed: make(chan struct{}), output: make(chan struct{})}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var stopped atomic.Bool // by an interrupt
	wg.Go(func() {
		first := true
		closed := out.closed
		// What became of the cancel, said when submit stops waiting; the cancel's goroutine
		// sends it once answered.
		cancelled := "its cancel was not answered and may not be stored (submit cancel " + id + " tries again)"
		answered := make(chan string, 1)
		var settleBy, status <-chan time.Time
		if isTerminal(stderr) {
			status = time.After(statusAfter)
		}
		output := out.output
		for {
			select {
			case <-done:
				return
			case <-output:
				output, status = nil, nil
				continue
			case <-status:
				status = nil
				fmt.Fprintln(stderr, waiting(ctx, c, id, detach))
				continue
			case cancelled = <-answered:
				settleBy = time.After(cancelWait)
				continue
			case <-settleBy:
				fmt.Fprintf(stderr, "submit: job %s has not settled %v after its cancel (does a worker serve its queue?); %s\n", id, cancelWait, cancelled)
				stopWaiting()
				return
			case s := <-sigs:
				if s == syscall.SIGPIPE && !first {
					continue // our own write to a closed stream, not a second Ctrl-C
				}
			case <-closed:
				closed = nil
				if !first {
					continue
				}
			}
			stopped.Store(true)
			switch {
			case detach:
				fmt.Fprintf(stderr, "submit: stopped watching job %s; it goes on\n", id)
				stopWaiting()
				return
			case !first:
				fmt.Fprintf(stderr, "submit: stopped waiting for job %s; %s\n", id, cancelled)
				stopWaiting()
				return
			}
			first, status = false, nil
			fmt.Fprintf(stderr, "submit: cancelling job %s and waiting for its settlement (Ctrl-C again stops waiting)\n", id)
			// The cancel runs beside the loop, so that a second signal stops waiting at once
			// (and ends the cancel's request with ctx).
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := c.Cancel(cctx, id)
				cancel()
				switch {
				case err == nil:
					answered <- "its cancel is stored and stands (submit watch " + id + " shows how it settles)"
				case errors.Is(err, runfleet.ErrSettled):
					answered <- "it had already settled (submit watch " + id + " shows how)"
				case ctx.Err() == nil:
					fmt.Fprintln(stderr, "submit:", describe(id, err))
					answered <- "its cancel was not stored and it may go on (submit cancel " + id + " tries again)"
				}
			})
		}
	})
	st, err := c.Watch(ctx, id, out.page)
	close(done)
	wg.Wait()
	code := exitOther
	switch {
	case stopped.Load() && errors.Is(err, runfleet.ErrNoSettlement):
	case errors.Is(err, runfleet.ErrExpired) && st.Status != "":
		// The pages are gone; the settlement is kept for the job's record.
		fmt.Fprintf(stderr, "submit: the output of job %s has expired; its settlement follows\n", id)
		out.settlement(st)
		code = exitCode(st, stderr)
	case err != nil:
		fail(stderr, describe(id, err))
	default:
		out.settlement(st)
		code = exitCode(st, stderr)
	}
	if stopped.Load() {
		return exitInterrupted
	}
	return code
}

// waiting is the one line a terminal gets when a followed job has shown no output for
// statusAfter: where the job is, and what the user can do.
func waiting(ctx context.Context, c *runfleet.Client, id string, detach bool) string {
	hint := "Ctrl-C cancels it"
	if detach {
		hint = "Ctrl-C stops watching"
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.Lookup(lctx, id)
	switch {
	case err == nil && info.State == runfleet.JobQueued:
		return fmt.Sprintf("submit: job %s has waited %v on queue %s and no worker has started it (submit workers lists the fleet; %s)", id, statusAfter, info.Queue, hint)
	case err == nil && info.State == runfleet.JobRunning:
		return fmt.Sprintf("submit: job %s is running, no output yet after %v (%s)", id, statusAfter, hint)
	}
	return fmt.Sprintf("submit: still waiting for job %s after %v (%s)", id, statusAfter, hint)
}

// isTerminal says whether w is a terminal, where a person waits and reads.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// pages writes a followed job's pages as its mode asks. A write to stdout that fails (a closed
// pipe: submit … | head) closes closed once; later output is dropped.
type pages struct {
	mode           mode
	stdout, stderr io.Writer
	closed         chan struct{}
	output         chan struct{} // closed at the first page
	broken         bool          // stdout failed; only Watch's callback reads and writes it
	paged          bool          // output is closed; likewise
}

// event is a line of --events: a page, or the settlement last.
type event struct {
	Type       string          `json:"type"`
	Stream     string          `json:"stream,omitempty"`
	Index      *int64          `json:"index,omitempty"`
	Data       *string         `json:"data,omitempty"`
	Encoding   string          `json:"encoding,omitempty"` // "base64" when Data is not UTF-8 text
	Settlement *job.Settlement `json:"settlement,omitempty"`
}

func (p *pages) page(pg runfleet.Page) error {
	if !p.paged {
		p.paged = true
		close(p.output)
	}
	if p.broken {
		return nil
	}
	var err error
	switch p.mode {
	case asJSON:
		return nil
	case asEvents:
		ev := event{Type: "page", Stream: pg.Stream, Index: &pg.Index}
		data := string(pg.Data)
		if !utf8.Valid(pg.Data) {
			data, ev.Encoding = base64.StdEncoding.EncodeToString(pg.Data), "base64"
		}
		ev.Data = &data
		err = json.NewEncoder(p.stdout).Encode(ev)
	default:
		if pg.Stream == job.Stderr {
			_, _ = p.stderr.Write(pg.Data)
			return nil
		}
		_, err = p.stdout.Write(pg.Data)
	}
	if err != nil {
		p.broken = true
		close(p.closed)
	}
	return nil
}

// settlement prints st when the mode asks for it and stdout still takes it.
func (p *pages) settlement(st job.Settlement) {
	switch {
	case p.broken:
	case p.mode == asJSON:
		enc := json.NewEncoder(p.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	case p.mode == asEvents:
		_ = json.NewEncoder(p.stdout).Encode(event{Type: "settlement", Settlement: &st})
	}
}

// describe says in words what a lookup of job id found, for the errors a user meets.
func describe(id string, err error) error {
	switch {
	case errors.Is(err, runfleet.ErrNotFound):
		return fmt.Errorf("no job %s: the fleet holds nothing of it (never submitted, or settled and long expired)", id)
	case errors.Is(err, runfleet.ErrExpired):
		return fmt.Errorf("job %s settled and its output has expired", id)
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
		if code, ok := st.Exit(); ok && code != 0 {
			return code
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
