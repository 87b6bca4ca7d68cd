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
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

func subcommand(sigs <-chan os.Signal, name string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("submit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	commonFlags(fs, &o)
	fs.BoolVar(&o.json, "json", false, "watch: print the settlement as JSON instead of the output")
	jobs := fs.Int("jobs", 200, "bench: jobs to send")
	conc := fs.Int("concurrency", 16, "bench: jobs in flight at once")
	lang := fs.String("lang", "python3", "bench: profile")
	code := fs.String("code", "pass", "bench: code of every job")
	if err := cli.Parse(fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitOther
	}
	needID := name == "watch" || name == "cancel"
	if needID && (fs.NArg() != 1 || !job.ValidID(fs.Arg(0))) {
		fmt.Fprintf(stderr, "usage: submit %s ID\n", name)
		return exitOther
	}
	c, nc, err := connect(o.natsURL, o.prefix)
	if err != nil {
		return fail(stderr, err)
	}
	defer nc.Close()
	switch name {
	case "watch":
		return follow(sigs, c, fs.Arg(0), o.json, stdout, stderr)
	case "cancel":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Cancel(ctx, fs.Arg(0)); err != nil {
			return fail(stderr, err)
		}
		fmt.Fprintf(stderr, "submit: cancel of %s stored\n", fs.Arg(0))
		return 0
	case "workers":
		return workers(nc, c.Subjects(), stdout, stderr)
	default:
		return bench(c, nc, o.queue, *jobs, *conc, *lang, *code, stdout, stderr)
	}
}

// workers listens to worker heartbeats for a few seconds and lists the workers heard.
func workers(nc *nats.Conn, s job.Subjects, stdout, stderr io.Writer) int {
	var mu sync.Mutex
	seen := map[string]map[string]any{}
	sub, err := nc.Subscribe(s.Workers(), func(m *nats.Msg) {
		var hb map[string]any
		if json.Unmarshal(m.Data, &hb) == nil {
			mu.Lock()
			seen[fmt.Sprint(hb["id"])] = hb
			mu.Unlock()
		}
	})
	if err != nil {
		return fail(stderr, err)
	}
	time.Sleep(2500 * time.Millisecond)
	_ = sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fmt.Fprintf(stdout, "%-32s %-10s %-9s %5s %7s  %s\n", "WORKER", "VERSION", "PROVIDER", "SLOTS", "RUNNING", "PROFILES")
	for _, id := range ids {
		hb := seen[id]
		profs, _ := json.Marshal(hb["profiles"])
		fmt.Fprintf(stdout, "%-32s %-10v %-9v %5v %7v  %s\n", id, hb["version"], hb["provider"], hb["slots"], hb["running"],
			strings.Trim(string(profs), "[]"))
	}
	return 0
}

// bench sends jobs with a bounded number in flight and reports jobs/s and the latency from
// publish to settlement.
func bench(c *runfleet.Client, nc *nats.Conn, queue string, n, conc int, lang, code string, stdout, stderr io.Writer) int {
	s := c.Subjects()
	var mu sync.Mutex
	sent := map[string]time.Time{}
	lat := make([]time.Duration, 0, n)
	statuses := map[job.Status]int{}
	slots := make(chan struct{}, conc)
	all := make(chan struct{})
	sub, err := nc.Subscribe(s.Prefix()+".results.*.settled", func(m *nats.Msg) {
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
		_, err := c.Submit(ctx, queue, req)
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
	fmt.Fprintf(stdout, "statuses %v\n", statuses)
	return 0
}
