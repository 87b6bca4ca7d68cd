package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

// Exit codes besides the program's own.
const (
	exitTimedOut = 124
	exitOther    = 125 // rejected, error, expired, cancelled, unknown, or submit's own failure
)

const usage = `usage: submit [flags] [FILE|-]
       submit watch ID
       submit cancel ID
       submit workers
       submit bench [--jobs N] [--concurrency C] [--lang L] [--code CODE]

Sends one job to a runfleet fleet and, by default, waits for it: the program's stdout and stderr
arrive on submit's own as the worker stores them, and submit exits with the program's exit code
(124 when it timed out; 125 when it was rejected, cancelled, expired, or ended in error or
unknown, with one line on stderr saying which and why).

Ctrl-C while waiting cancels the job and waits for its settlement; a second Ctrl-C leaves the job
running and prints how to watch it.

Examples:
  submit --lang python3 --code 'print(6*7)'
  echo 'import sys; sys.exit(3)' | submit --lang python3 -
  submit script.js --stdin "$(cat input.txt)" --env MODE=fast --timeout 5s
  submit --no-wait analysis.py            # prints the job id
  submit watch 6b0f…                      # replay and follow a job
  submit --json --code 'print(1)' --lang python3 | jq .status

Every flag also reads RUNFLEET_<NAME> from the environment (--nats-url ↔ RUNFLEET_NATS_URL).

Flags:
`

type options struct {
	replicas                                                                          int
	natsURL, prefix, queue, lang, code, stdin, id, timeout, outputBytes, memory, pids string
	env, files                                                                        cli.List
	noWait, json                                                                      bool
}

// connectionFlags are the flags that also read RUNFLEET_* (CLI.md); the per-job flags read none.
var connectionFlags = []string{"nats-url", "prefix", "queue", "stream-replicas"}

func commonFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.natsURL, "nats-url", nats.DefaultURL, "NATS server(s), comma separated")
	fs.StringVar(&o.prefix, "prefix", job.DefaultPrefix, "subject and stream prefix of the fleet")
	fs.StringVar(&o.queue, "queue", job.DefaultQueue, "queue to submit to")
	fs.IntVar(&o.replicas, "stream-replicas", 1, "JetStream replicas of the streams when submit creates or raises them")
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
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	commonFlags(fs, &o)
	fs.StringVar(&o.lang, "lang", "", "profile name (python3, nodejs); guessed from FILE's extension")
	fs.StringVar(&o.code, "code", "", "the code as a string, instead of FILE")
	fs.StringVar(&o.stdin, "stdin", "", "what the program reads on its standard input")
	fs.Var(&o.env, "env", "K=V: an environment variable of the program (repeatable)")
	fs.Var(&o.files, "file", "SRC[:DEST]: a file written under /workspace before the code runs (repeatable)")
	fs.StringVar(&o.timeout, "timeout", "", "wall-clock limit, e.g. 10s (default: the worker's)")
	fs.StringVar(&o.outputBytes, "output-bytes", "", "limit of stdout and stderr together, e.g. 1m")
	fs.StringVar(&o.memory, "memory", "", "memory limit, e.g. 256m")
	fs.StringVar(&o.pids, "pids", "", "process limit")
	fs.StringVar(&o.id, "id", "", "job id (default: a new UUID)")
	fs.BoolVar(&o.noWait, "no-wait", false, "print the job id and exit 0 once the job is stored")
	fs.BoolVar(&o.json, "json", false, "print the settlement as JSON instead of the output")
	var arts artifactFlags
	arts.register(fs)
	if err := cli.ParseEnvOf(fs, args, getenv, connectionFlags...); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitOther
	}
	req, err := buildRequest(&o, fs.Args(), stdin)
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
	sub, err := c.Submit(ctx, o.queue, req)
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
	return arts.after(c, sub.ID, follow(sigs, c, sub.ID, o.json, stdout, stderr), stderr)
}

// connect returns a client and its connection; the caller closes the connection.
func connect(o options) (*runfleet.Client, *nats.Conn, error) {
	nc, err := nats.Connect(o.natsURL, nats.Name("runfleet-submit"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (is a worker --dev or nats-server running?)", o.natsURL, err)
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

var extLang = map[string]string{".py": "python3", ".js": "nodejs", ".mjs": "nodejs", ".cjs": "nodejs"}

func buildRequest(o *options, args []string, stdin io.Reader) (job.Request, error) {
	req := job.Request{ID: o.id, Language: o.lang, Code: o.code, Stdin: o.stdin}
	switch {
	case len(args) > 1:
		return req, fmt.Errorf("one FILE at most, got %d (flags go before FILE)", len(args))
	case len(args) == 1 && o.code != "":
		return req, errors.New("give --code or FILE, not both")
	case len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return req, fmt.Errorf("read code from stdin: %w", err)
		}
		req.Code = string(b)
	case len(args) == 1:
		b, err := os.ReadFile(args[0])
		if err != nil {
			return req, err
		}
		req.Code = string(b)
		if req.Language == "" {
			req.Language = extLang[strings.ToLower(filepath.Ext(args[0]))]
		}
	case o.code == "":
		return req, errors.New("no code: give FILE, - for stdin, or --code (see submit --help)")
	}
	if req.Language == "" {
		return req, errors.New("no language: give --lang python3 or --lang nodejs")
	}
	for _, kv := range o.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return req, fmt.Errorf("--env %q: want K=V", kv)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	for _, f := range o.files {
		src, dest, ok := strings.Cut(f, ":")
		if !ok {
			dest = filepath.Base(src)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return req, fmt.Errorf("--file: %w", err)
		}
		req.Files = append(req.Files, job.File{Path: dest, Content: b})
	}
	var err error
	if o.timeout != "" {
		d, perr := time.ParseDuration(o.timeout)
		if perr != nil || d <= 0 {
			return req, fmt.Errorf("--timeout %q: want a positive duration like 10s", o.timeout)
		}
		req.Limits.Timeout = d
	}
	if req.Limits.OutputBytes, err = optBytes("--output-bytes", o.outputBytes); err != nil {
		return req, err
	}
	if req.Limits.MemoryBytes, err = optBytes("--memory", o.memory); err != nil {
		return req, err
	}
	if o.pids != "" {
		n, perr := strconv.ParseInt(o.pids, 10, 64)
		if perr != nil || n <= 0 {
			return req, fmt.Errorf("--pids %q: want a positive whole number", o.pids)
		}
		req.Limits.Pids = n
	}
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	return req, nil
}

// optBytes parses sizes like 1048576, 64k, 256m, 1g (powers of 1024); "" is 0, the default.
func optBytes(flagName, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	}
	num := s
	if mult > 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%s %q: want a positive size like 65536, 64k or 256m", flagName, s)
	}
	return n * mult, nil
}

// follow streams job id's pages and returns the exit code its settlement calls for.
func follow(sigs <-chan os.Signal, c *runfleet.Client, id string, asJSON bool, stdout, stderr io.Writer) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		fmt.Fprintf(stderr, "submit: cancelling job %s (Ctrl-C again to leave it running)\n", id)
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.Cancel(cctx, id); err != nil {
			fmt.Fprintln(stderr, "submit:", err)
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
	if errors.Is(err, runfleet.ErrNoSettlement) {
		return exitOther
	}
	if err != nil {
		return fail(stderr, err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	}
	return exitCode(st, stderr)
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
