// Command cpbench measures runfleet's control plane alone: one worker whose provider runs nothing
// (package nop), a nats-server with JetStream on file storage and a redis-server, each its own
// process on this machine. It prints jobs/s, publish → settled latency percentiles, and the CPU
// each process spent per job, read from /proc/PID/stat before and after the run.
//
//	go run ./internal/cmd/cpbench --jobs 5000 --inflight 64 --cpuprofile /tmp/worker.pprof
//
// Two runs: a latency run (one job at a time, so the latency is the path's own, not a queue's)
// and a throughput run (--inflight jobs published and not yet settled at any moment). The worker
// is this program started again as `cpbench worker`, so that its CPU is its own.
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/cmd/cpbench/nop"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/runner"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err = worker(ctx, os.Args[2:])
	} else {
		err = bench(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpbench:", err)
		os.Exit(1)
	}
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux architecture Go
// supports.
const clockTick = 10 * time.Millisecond

type benchConfig struct {
	jobs, latencyJobs, inflight, concurrency int
	cpuProfile, appendfsync, dir             string
	stdout, tenants, rounds                  int
}

func bench(ctx context.Context, args []string, out io.Writer) error {
	var c benchConfig
	fs := flag.NewFlagSet("cpbench", flag.ContinueOnError)
	fs.IntVar(&c.jobs, "jobs", 5000, "jobs of the throughput run")
	fs.IntVar(&c.latencyJobs, "latency-jobs", 300, "jobs of the latency run, one at a time")
	fs.IntVar(&c.inflight, "inflight", 64, "jobs published and not yet settled at once in the throughput run")
	fs.IntVar(&c.concurrency, "concurrency", 64, "the worker's slots")
	fs.IntVar(&c.stdout, "stdout", 0, "bytes each job prints (0: none, like `pass`)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the worker's CPU profile of the throughput run to this file")
	fs.StringVar(&c.appendfsync, "appendfsync", "everysec", "redis-server's AOF appendfsync (everysec, always), or no for no AOF")
	fs.IntVar(&c.tenants, "tenants", 1, "tenants the jobs are spread over, in turn (1: all the default tenant's)")
	fs.IntVar(&c.rounds, "rounds", 0, "compare in this process: rounds of a --jobs block of one tenant's jobs, then one spread over --tenants (the order alternates), instead of the latency and throughput runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.rounds > 0 && c.tenants < 2 {
		return errors.New("--rounds compares with --tenants 2 or more")
	}
	dir, err := os.MkdirTemp("", "cpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.dir = dir

	natsURL, natsProc, err := startNATS(ctx, dir)
	if err != nil {
		return err
	}
	defer stopProc(natsProc)
	redisURL, redisProc, err := startRedis(ctx, dir, c.appendfsync)
	if err != nil {
		return err
	}
	defer stopProc(redisProc)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The publisher's own max_queued check is not what is measured here (no policy is set).
	client, err := runfleet.NewClient(ctx, nc, runfleet.Options{SkipQueueCheck: true})
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	w := exec.Command(self, "worker", "--nats-url", natsURL, "--redis-url", redisURL,
		"--concurrency", strconv.Itoa(c.concurrency), "--stdout", strconv.Itoa(c.stdout),
		"--log", filepath.Join(dir, "worker.log"), "--cpuprofile-signal", c.cpuProfile)
	w.Stderr = os.Stderr
	ready, err := w.StdoutPipe()
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	defer stopProc(w)
	if line, err := bufio.NewReader(ready).ReadString('\n'); err != nil || line != "ready\n" {
		return fmt.Errorf("worker did not start: %q %w", line, err)
	}

	s, err := newSettled(nc, client.Subjects(), c.tenants)
	if err != nil {
		return err
	}
	defer s.close()
	// A short warm-up: connections, consumers (one per tenant) and Redis scripts made before
	// anything counts.
	if _, err := s.run(ctx, client, max(50, c.tenants), 8); err != nil {
		return err
	}
	procs := []proc{{"worker", w.Process.Pid}, {"nats-server", natsProc.Process.Pid}, {"redis-server", redisProc.Process.Pid}, {"cpbench (publisher)", os.Getpid()}}
	if c.rounds > 0 {
		return compare(ctx, c, s, client, procs, out)
	}
	lat, err := s.run(ctx, client, c.latencyJobs, 1)
	if err != nil {
		return err
	}
	if c.cpuProfile != "" {
		_ = w.Process.Signal(syscall.SIGUSR1) // starts the profile
	}
	before := cpuTimes(procs)
	start := time.Now()
	thr, err := s.run(ctx, client, c.jobs, c.inflight)
	elapsed := time.Since(start)
	after := cpuTimes(procs)
	if c.cpuProfile != "" {
		_ = w.Process.Signal(syscall.SIGUSR1) // stops it, and writes the file
	}
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "control plane alone: one worker (nop provider, %d slots), nats-server and redis-server (appendfsync %s), jobs of %d tenant(s)\n", c.concurrency, c.appendfsync, c.tenants)
	fmt.Fprintf(out, "latency run, one job at a time, %d jobs: p50 %s, p99 %s\n", len(lat), pct(lat, 50), pct(lat, 99))
	fmt.Fprintf(out, "throughput run, %d jobs, %d in flight: %.0f jobs/s, p50 %s, p99 %s\n", len(thr), c.inflight,
		float64(len(thr))/elapsed.Seconds(), pct(thr, 50), pct(thr, 99))
	fmt.Fprintf(out, "CPU per job in the throughput run (USER_HZ ticks over %d jobs):\n", len(thr))
	for i, p := range procs {
		d := after[i] - before[i]
		fmt.Fprintf(out, "  %-20s %7.1f µs\n", p.name, float64(d.Microseconds())/float64(len(thr)))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if st, err := js.Stream(ctx, client.Subjects().JobsStream()); err == nil {
		fmt.Fprintf(out, "jobs stream consumers: %d; worker resident memory: %s\n", st.CachedInfo().State.Consumers, rss(w.Process.Pid))
	}
	return nil
}

// compare runs c.rounds rounds of two blocks of c.jobs jobs on the same worker, servers and
// consumers: all of one tenant, and spread over c.tenants in turn. Each round's ratio compares
// blocks seconds apart, so that a machine whose speed drifts (a shared VM's does, by a third over
// minutes) moves both sides of it; the order within a round alternates.
func compare(ctx context.Context, c benchConfig, s *settled, client *runfleet.Client, procs []proc, out io.Writer) error {
	fmt.Fprintf(out, "control plane alone: one worker (nop provider, %d slots), nats-server and redis-server (appendfsync %s)\n", c.concurrency, c.appendfsync)
	fmt.Fprintf(out, "%d rounds of %d jobs of 1 tenant and %d jobs of %d tenants, %d in flight\n", c.rounds, c.jobs, c.jobs, c.tenants, c.inflight)
	cpu := map[int][]time.Duration{1: make([]time.Duration, len(procs)), c.tenants: make([]time.Duration, len(procs))}
	var ratios []float64
	for r := range c.rounds {
		order := []int{1, c.tenants}
		if r%2 == 1 {
			order = []int{c.tenants, 1}
		}
		rate := map[int]float64{}
		for _, t := range order {
			s.tenants = t
			before := cpuTimes(procs)
			start := time.Now()
			if _, err := s.run(ctx, client, c.jobs, c.inflight); err != nil {
				return err
			}
			rate[t] = float64(c.jobs) / time.Since(start).Seconds()
			for i, a := range cpuTimes(procs) {
				cpu[t][i] += a - before[i]
			}
		}
		ratio := rate[c.tenants] / rate[1]
		ratios = append(ratios, ratio)
		fmt.Fprintf(out, "round %2d: 1 tenant %5.0f jobs/s, %d tenants %5.0f jobs/s, ratio %.3f\n", r+1, rate[1], c.tenants, rate[c.tenants], ratio)
	}
	var sum, sq float64
	for _, x := range ratios {
		sum += x
	}
	mean := sum / float64(len(ratios))
	for _, x := range ratios {
		sq += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(sq / float64(max(len(ratios)-1, 1)))
	fmt.Fprintf(out, "ratio %d tenants / 1: mean %.3f, sd %.3f, standard error %.3f\n", c.tenants, mean, sd, sd/math.Sqrt(float64(len(ratios))))
	fmt.Fprintf(out, "CPU per job (USER_HZ ticks, all rounds): %-20s %12s %12s\n", "", "1 tenant", strconv.Itoa(c.tenants)+" tenants")
	n := float64(c.jobs * c.rounds)
	for i, p := range procs {
		fmt.Fprintf(out, "  %-20s %9.1f µs %9.1f µs\n", p.name, float64(cpu[1][i].Microseconds())/n, float64(cpu[c.tenants][i].Microseconds())/n)
	}
	return nil
}

// rss reads a process's resident set size from /proc/PID/status.
func rss(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

type proc struct {
	name string
	pid  int
}

// cpuTimes reads each process's user+system time from /proc/PID/stat; an unreadable one is 0.
func cpuTimes(ps []proc) []time.Duration {
	ts := make([]time.Duration, len(ps))
	for i, p := range ps {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: the fields follow the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ts[i] = time.Duration(u+s) * clockTick
	}
	return ts
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(10 * time.Microsecond)
}

// settled hears every settlement on a core subscription and hands each to the run waiting for
// its job.
type settled struct {
	sub      *nats.Subscription
	subjects job.Subjects
	tenants  int
	turn     atomic.Uint64 // the next job's tenant, in turn
	mu       sync.Mutex
	waiting  map[string]chan time.Time
}

func newSettled(nc *nats.Conn, subjects job.Subjects, tenants int) (*settled, error) {
	s := &settled{subjects: subjects, tenants: max(tenants, 1), waiting: map[string]chan time.Time{}}
	sub, err := nc.Subscribe(subjects.AllResults(), func(m *nats.Msg) {
		at := time.Now()
		_, id, kind, ok := subjects.ParseResult(m.Subject)
		if !ok || kind != "settled" {
			return
		}
		s.mu.Lock()
		ch := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- at
		}
	})
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	s.sub = sub
	return s, nil
}

func (s *settled) close() { _ = s.sub.Unsubscribe() }

// run publishes n jobs, at most inflight unsettled at once, and returns each one's publish →
// settled latency.
func (s *settled) run(ctx context.Context, c *runfleet.Client, n, inflight int) ([]time.Duration, error) {
	body := []byte(`{"language":"python3","code":"pass"}`)
	lat := make([]time.Duration, n)
	errs := make(chan error, inflight)
	next := make(chan int)
	var wg sync.WaitGroup
	for range inflight {
		wg.Go(func() {
			for i := range next {
				id := job.NewID()
				ch := make(chan time.Time, 1)
				s.mu.Lock()
				s.waiting[id] = ch
				s.mu.Unlock()
				start := time.Now()
				var o *runfleet.SubmitOptions
				if s.tenants > 1 {
					o = &runfleet.SubmitOptions{Tenant: "t" + strconv.FormatUint(s.turn.Add(1)%uint64(s.tenants), 10)}
				}
				if _, err := c.SubmitRaw(ctx, "", id, body, o); err != nil {
					errs <- err
					return
				}
				select {
				case at := <-ch:
					lat[i] = at.Sub(start)
				case <-time.After(30 * time.Second):
					errs <- fmt.Errorf("job %s: no settlement in 30 s", id)
					return
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case e := <-errs:
		err = cmp.Or(err, e)
	default:
	}
	return lat, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startNATS(ctx context.Context, dir string) (string, *exec.Cmd, error) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return "", nil, errors.New("nats-server not on PATH (scripts/setup deploy builds it)")
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "nats"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(15 * time.Second); ; {
		nc, err := nats.Connect(url)
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(ctx)
			nc.Close()
			if err == nil {
				return url, cmd, nil
			}
		}
		if time.Now().After(deadline) {
			stopProc(cmd)
			return "", nil, fmt.Errorf("nats-server not ready in 15 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startRedis(ctx context.Context, dir, appendfsync string) (string, *exec.Cmd, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not on PATH")
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--dir", dir, "--daemonize", "no"}
	if appendfsync == "no" {
		args = append(args, "--appendonly", "no")
	} else {
		args = append(args, "--appendonly", "yes", "--appendfsync", appendfsync)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(15 * time.Second); rdb.Ping(ctx).Err() != nil; {
		if time.Now().After(deadline) {
			stopProc(cmd)
			return "", nil, errors.New("redis-server not ready in 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "redis://" + addr + "/0", cmd, nil
}

// stopProc ends a process this program started and waits for it.
func stopProc(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// worker is one runfleet worker with the nop provider, wired as cmd/worker wires a real one: a
// pool of waiting sandboxes, the runner, JSON logs at Info to a file.
func worker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cpbench worker", flag.ContinueOnError)
	natsURL := fs.String("nats-url", "", "")
	redisURL := fs.String("redis-url", "", "")
	concurrency := fs.Int("concurrency", 64, "")
	stdout := fs.Int("stdout", 0, "")
	logPath := fs.String("log", "", "")
	profilePath := fs.String("cpuprofile-signal", "", "CPU profile started by the first SIGUSR1, written at the second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logFile, err := os.Create(*logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewJSONHandler(logFile, nil)).With("worker", "cpbench")

	subjects, _ := job.NewSubjects("")
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := protocol.EnsureStreams(ctx, js, subjects, protocol.StreamOptions{}); err != nil {
		return err
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	leases := lease.NewStore(rdb, lease.Options{})
	if err := leases.Init(ctx); err != nil {
		return err
	}
	provider := &nop.Provider{Stdout: []byte(strings.Repeat("x", *stdout))}
	profiles := profile.Set{"python3": profile.Builtin("", "")["python3"]}
	policy := job.DefaultPolicy()
	sopts := runner.SandboxOptions{CPUs: 1}
	d := policy.Default
	shapes := []sandbox.Shape{sopts.Shape(profiles["python3"], sandbox.Limits{Timeout: d.Timeout, MemoryBytes: d.MemoryBytes, Pids: d.Pids})}
	warm := pool.New(provider, shapes, pool.Options{Size: *concurrency, Logger: log})
	r := runner.New(nc, js, subjects, leases, provider, runner.Options{Worker: "cpbench", Concurrency: *concurrency,
		Policy: policy, Profiles: profiles, Sandbox: sopts, Sandboxes: warm, Logger: log})

	var bg sync.WaitGroup
	defer bg.Wait()
	poolCtx, stopPool := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPool()
	bg.Go(func() { warm.Run(poolCtx) })
	bg.Go(func() { profileOnSignal(ctx, *profilePath, log) })
	bg.Go(func() {
		for !r.Consuming() || warm.Waiting() < *concurrency {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		fmt.Println("ready")
	})
	return r.Serve(ctx, ctx)
}

// profileOnSignal starts a CPU profile at the first SIGUSR1 and writes it at the second.
func profileOnSignal(ctx context.Context, path string, log *slog.Logger) {
	if path == "" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	var f *os.File
	for {
		select {
		case <-ctx.Done():
			if f != nil {
				pprof.StopCPUProfile()
				f.Close()
			}
			return
		case <-sig:
		}
		if f == nil {
			var err error
			if f, err = os.Create(path); err != nil {
				log.Error("cpu profile", "err", err)
				return
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				log.Error("cpu profile", "err", err)
				return
			}
			continue
		}
		pprof.StopCPUProfile()
		f.Close()
		f = nil
	}
}
