package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// subUsage is each subcommand's --help, before its flags.
var subUsage = map[string]string{
	"watch": `usage: submit watch ID [flags]

Replays and follows job ID's output and settlement, exiting as submit does. An unknown id, or one
whose results expired, fails at once. Ctrl-C, SIGTERM, SIGHUP or a closed standard output only stop
watching (exit 130): the job goes on.

Flags:
`,
	"cancel": `usage: submit cancel ID [flags]

Cancels job ID, waiting or running. An unknown id, a settled job or one whose results expired is
one line on stderr and exit 125.

Flags:
`,
	"workers": `usage: submit workers [flags]

Lists the workers that answer a ping or send a heartbeat; waits 2.5 s only while none answered,
and exits 1 when none did.

Flags:
`,
	"bench": `usage: submit bench [--jobs N] [--concurrency C] [--lang L] [--code CODE] [flags]

Sends N jobs, C in flight, and prints jobs/s, latency percentiles from publish to settlement and
the statuses; exits 1 when a job did not succeed. --code defaults to a no-op of --lang.

Flags:
`,
}

// benchNoop is the code of submit bench's jobs when --code is not given.
var benchNoop = map[string]string{"python3": "pass", "nodejs": "void 0"}

func subcommand(sigs <-chan os.Signal, name string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := cli.NewFlagSet("submit "+name, subUsage[name], stdout)
	commonFlags(fs, &o)
	var b benchOptions
	switch name {
	case "watch":
		outputFlags(fs, &o)
	case "workers":
		fs.BoolVar(&o.json, "json", false, "print each worker's heartbeat as a line of JSON instead of the table")
	case "bench":
		fs.IntVar(&b.jobs, "jobs", 200, "jobs to send")
		fs.IntVar(&b.concurrency, "concurrency", 16, "jobs in flight at once")
		fs.StringVar(&b.lang, "lang", "python3", "profile of every job")
		fs.StringVar(&b.code, "code", "", "code of every job (default: a no-op of --lang)")
	}
	pos, _, err := cli.ParseInterspersed(fs, args, getenv, connectionFlags...)
	if err != nil {
		return parseFailed(stdout, stderr, err)
	}
	if b.code == "" {
		b.code = benchNoop[b.lang]
	}
	needID := name == "watch" || name == "cancel"
	switch {
	case needID && len(pos) != 1:
		return usageFailed(stderr, fmt.Errorf("usage: submit %s ID", name))
	case needID && !job.ValidID(pos[0]):
		return usageFailed(stderr, fmt.Errorf("%q: %w", pos[0], job.ErrInvalidID))
	case !needID && len(pos) > 0:
		return usageFailed(stderr, fmt.Errorf("submit %s takes no arguments, got %q", name, pos))
	case o.json && o.events:
		return usageFailed(stderr, errors.New("give --json or --events, not both"))
	case name == "bench":
		if err := b.validate(); err != nil {
			return usageFailed(stderr, err)
		}
	}
	c, nc, err := connect(o, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	switch name {
	case "watch":
		return follow(sigs, c, pos[0], o.mode(), true, stdout, stderr)
	case "cancel":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Cancel(ctx, pos[0]); err != nil {
			return fail(stderr, describe(pos[0], err))
		}
		fmt.Fprintf(stderr, "submit: cancel of job %s stored\n", pos[0])
		return 0
	case "workers":
		return workers(nc, c.Subjects(), o.json, stdout, stderr)
	default:
		return bench(c, nc, o.queue, b, stdout, stderr)
	}
}

// benchOptions are submit bench's own flags.
type benchOptions struct {
	jobs, concurrency int
	lang, code        string
}

func (b benchOptions) validate() error {
	switch {
	case b.jobs < 1:
		return fmt.Errorf("--jobs %d: want at least 1", b.jobs)
	case b.concurrency < 1:
		return fmt.Errorf("--concurrency %d: want at least 1", b.concurrency)
	case b.lang == "" || b.code == "":
		return fmt.Errorf("--lang %q: no built-in no-op for it; give --code", b.lang)
	}
	return nil
}

// workers pings the fleet's workers and lists those that answer. A worker answers a ping at once;
// one that does not (an older version) is still heard by its heartbeat, every 2 s, so submit
// waits a heartbeat period only while nobody answered. None answering is exit 1, so that a
// script can tell an empty fleet.
func workers(nc *nats.Conn, s job.Subjects, asJSON bool, stdout, stderr io.Writer) int {
	const period, quiet = protocol.HeartbeatPeriod + 500*time.Millisecond, 300 * time.Millisecond
	var mu sync.Mutex
	seen := map[string]protocol.Heartbeat{}
	raw := map[string]json.RawMessage{}
	heard := make(chan struct{}, 1)
	record := func(m *nats.Msg) {
		var hb protocol.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil || !hb.Plausible(time.Now()) {
			return
		}
		mu.Lock()
		if _, ok := seen[hb.ID]; ok || len(seen) < protocol.MaxWorkersListed { // a flood of ids lists no more
			seen[hb.ID], raw[hb.ID] = hb, m.Data
		}
		mu.Unlock()
		select {
		case heard <- struct{}{}:
		default:
		}
	}
	inbox := nats.NewInbox()
	replies, err := nc.Subscribe(inbox, record)
	if err != nil {
		return fail(stderr, err)
	}
	defer func() { _ = replies.Unsubscribe() }()
	beats, err := nc.Subscribe(s.Workers(), record)
	if err != nil {
		return fail(stderr, err)
	}
	defer func() { _ = beats.Unsubscribe() }()
	if err := nc.PublishRequest(s.WorkersPing(), inbox, nil); err != nil {
		return fail(stderr, err)
	}
	deadline := time.After(period)
	wait := deadline
	for done := false; !done; {
		select {
		case <-heard:
			wait = time.After(quiet) // more answers come close together; stop once they pause
		case <-wait:
			done = true
		case <-deadline:
			done = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	ids := slices.Sorted(maps.Keys(seen))
	if len(ids) == 0 {
		fmt.Fprintf(stderr, "submit: no worker answered within %v\n", period)
		return 1
	}
	if asJSON {
		for _, id := range ids {
			var line bytes.Buffer
			if json.Compact(&line, raw[id]) == nil {
				fmt.Fprintln(stdout, line.String())
			}
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tVERSION\tARCH\tPROVIDER\tCGROUP\tSLOTS\tRUNNING\tWAITING\tPROFILES")
	for _, id := range ids {
		hb := seen[id]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", id, hb.Version, hb.Arch, hb.Provider, hb.Cgroup,
			hb.Slots, hb.Running, hb.Waiting, strings.Join(hb.Profiles, ","))
	}
	_ = tw.Flush()
	return 0
}

// bench sends jobs with a bounded number in flight and reports jobs/s and the latency from
// publish to settlement.
// It exits 1 when a job did not succeed.
func bench(c *runfleet.Client, nc *nats.Conn, queue string, b benchOptions, stdout, stderr io.Writer) int {
	n, conc, lang, code := b.jobs, b.concurrency, b.lang, b.code
	s := c.Subjects()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	lat := make([]time.Duration, 0, n)
	statuses := map[job.Status]int{}
	slots := make(chan struct{}, conc)
	all := make(chan struct{})
	sub, err := nc.Subscribe(s.Settled(c.Tenant(), "*"), func(m *nats.Msg) {
		var st job.Settlement
		if json.Unmarshal(m.Data, &st) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		t0, ok := sent[st.JobID]
		if !ok {
			return
		}
		delete(sent, st.JobID)
		lat = append(lat, time.Since(t0))
		statuses[st.Status]++
		<-slots
		if len(lat) == n {
			close(all)
		}
	})
	if err != nil {
		return fail(stderr, err)
	}
	defer sub.Unsubscribe()
	start := time.Now()
	for range n {
		slots <- struct{}{}
		req := job.Request{ID: uuid.NewString(), Language: lang, Code: code}
		mu.Lock()
		sent[req.ID] = time.Now()
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Submit(ctx, queue, req, nil)
		cancel()
		if err != nil {
			return fail(stderr, err)
		}
	}
	select {
	case <-all:
	case <-time.After(5*time.Minute + time.Duration(n)*100*time.Millisecond):
		fmt.Fprintf(stderr, "submit: bench: %d of %d jobs settled before the time limit\n", len(lat), n)
		return exitOther
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Fprintf(stdout, "jobs %d  concurrency %d  lang %s  elapsed %v  %.1f jobs/s\n", n, conc, lang, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	fmt.Fprintf(stdout, "publish→settlement p50 %v  p90 %v  p99 %v  max %v\n", pct(.5).Round(time.Microsecond*100),
		pct(.9).Round(time.Microsecond*100), pct(.99).Round(time.Microsecond*100), lat[len(lat)-1].Round(time.Microsecond*100))
	fmt.Fprintf(stdout, "statuses %s\n", statusLine(statuses))
	if statuses[job.StatusSucceeded] != n {
		fmt.Fprintf(stderr, "submit: bench: %d of %d jobs did not succeed\n", n-statuses[job.StatusSucceeded], n)
		return 1
	}
	return 0
}

// statusLine prints counts of statuses in a fixed order: "succeeded 198, failed 2".
func statusLine(counts map[job.Status]int) string {
	parts := make([]string, 0, len(counts))
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", st, counts[st]))
	}
	return strings.Join(parts, ", ")
}
