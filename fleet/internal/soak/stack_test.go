package soak

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// workerBin is cmd/worker as released (no fault points).
var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runfleet-soak-")
	if err != nil {
		panic(err)
	}
	if workerBin, err = testenv.BuildProgram(dir, "cmd/worker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	sentinelName = "runfleet"
	leaseTTL     = 3 * time.Second
	concurrency  = 2
)

// stack is the services the workers share: JetStream, and Redis behind Sentinel as a master and
// one replica that swap roles at each failover.
type stack struct {
	t         *testing.T
	nats      *testenv.NATS
	redis     [2]*testenv.Redis
	master    int // index in redis of the current master
	sentinels []string
	redisURL  string
	client    *runfleet.Client
	js        jetstream.JetStream
	subjects  job.Subjects
	dlog      string // the provider's dispatch log, shared by every worker
	workers   []*worker
}

// replArgs start a redis-server that serves a replica at once.
var replArgs = []string{"--repl-diskless-sync-delay", "0"}

func newStack(t *testing.T) *stack {
	t.Helper()
	testenv.NeedRoot(t)
	s := &stack{t: t, nats: testenv.StartNATS(t), dlog: filepath.Join(t.TempDir(), "dispatches")}
	s.redis[0] = testenv.StartRedis(t, replArgs...)
	s.redis[1] = testenv.StartReplica(t, s.redis[0], replArgs...)
	// Down after 1 s of silence; a failover is not tried again for twice the 10 s timeout, well
	// under the time between two failovers.
	s.sentinels = testenv.StartSentinels(t, s.redis[0], sentinelName, 3, time.Second, 10*time.Second)
	s.redisURL = "redis+sentinel://" + strings.Join(s.sentinels, ",") + "/" + sentinelName
	nc := s.nats.Conn()
	var err error
	if s.client, err = runfleet.NewClient(t.Context(), nc, runfleet.Options{}); err != nil {
		t.Fatal(err)
	}
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	s.subjects = s.client.Subjects()
	if err := protocol.EnsureStreams(t.Context(), s.js, s.subjects, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// epochsSettled waits until the workers' key space epochs are older than the claim's skew
// allowance: a job stored sooner and redelivered without a record would be taken for one whose
// record was lost (as in internal/e2e's failover tests).
func (s *stack) epochsSettled() {
	s.t.Helper()
	rdb := s.redis[s.master].Client()
	var epoch time.Time
	testenv.WaitFor(s.t, time.Minute, "the workers set their epochs", func() bool {
		ms, err := rdb.Get(s.t.Context(), keyspace.New("runfleet").Epoch(keyspace.Buckets-1)).Int64()
		epoch = time.UnixMilli(ms)
		return err == nil
	})
	testenv.WaitFor(s.t, time.Minute, "the epochs older than the skew allowance", func() bool {
		now, err := rdb.Time(s.t.Context()).Result()
		return err == nil && now.After(epoch.Add(lease.DefaultSkew+500*time.Millisecond))
	})
}

// replicaInSync waits until the master counts the replica online, and a majority of the Sentinels
// count it as a healthy replica they may promote.
func (s *stack) replicaInSync(within time.Duration) time.Duration {
	s.t.Helper()
	master, replica := s.redis[s.master], s.redis[1-s.master]
	mc := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer mc.Close()
	took := testenv.WaitFor(s.t, within, "replica "+replica.Addr+" in sync with "+master.Addr, func() bool {
		info, err := mc.Info(s.t.Context(), "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return false
		}
		_, port, _ := strings.Cut(replica.Addr, ":")
		return strings.Contains(info, "port="+port+",state=online")
	})
	// A failover needs a majority of the Sentinels to agree on a replica to promote.
	deadline := time.Now().Add(within)
	for {
		var views []string
		agree := 0
		for _, addr := range s.sentinels {
			view := sentinelView(s.t, addr)
			views = append(views, addr+": "+view)
			if strings.HasPrefix(view, "master "+master.Addr+"; ") && strings.Contains(view, replica.Addr+" slave ok") {
				agree++
			}
		}
		if agree > len(s.sentinels)/2 {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("a majority of the Sentinels do not see replica %s of %s within %v: %s", replica.Addr, master.Addr, within, strings.Join(views, " | "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return took
}

// sentinelView is what the Sentinel at addr says of the master and its replicas.
func sentinelView(t *testing.T, addr string) string {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	m, err := sc.GetMasterAddrByName(t.Context(), sentinelName).Result()
	if err != nil || len(m) != 2 {
		return fmt.Sprintf("no master (%v)", err)
	}
	rs, err := sc.Replicas(t.Context(), sentinelName).Result()
	if err != nil {
		return fmt.Sprintf("master %s:%s; replicas: %v", m[0], m[1], err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r["ip"]+":"+r["port"]+" "+r["flags"]+" "+r["master-link-status"])
	}
	return fmt.Sprintf("master %s:%s; replicas: %s", m[0], m[1], strings.Join(out, ", "))
}

// failover SIGKILLs the master, waits for Sentinel to promote the replica and starts the old
// master again, which Sentinel makes the new master's replica. It returns how long the
// promotion took to be seen.
func (s *stack) failover() time.Duration {
	s.t.Helper()
	old, next := s.redis[s.master], s.redis[1-s.master]
	old.Stop()
	took := testenv.WaitFor(s.t, 2*time.Minute, "Sentinel promotes "+next.Addr, func() bool {
		return testenv.SentinelMaster(s.t, s.sentinels[0], sentinelName) == next.Addr
	})
	s.master = 1 - s.master
	// Started empty as a supervisor would; the restarted replica's own --replicaof, or
	// Sentinel's reconfiguration of the old master, points it at the new master.
	old.Restart()
	return took
}

// worker is one worker process.
type worker struct {
	id   string
	addr string // --listen: /metrics and /readyz
	cmd  *exec.Cmd
	log  *testenv.Buffer
	done chan struct{}
}

func (s *stack) startWorker(id string) *worker {
	s.t.Helper()
	w := &worker{id: id, addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(s.t)), log: &testenv.Buffer{}, done: make(chan struct{})}
	args := []string{"--nats-url", s.nats.URL, "--redis-url", s.redisURL, "--id", id, "--listen", w.addr,
		"--lease-ttl", leaseTTL.String(), "--concurrency", strconv.Itoa(concurrency), "--dispatch-log", s.dlog,
		"--grace", "5s",
		// Redis errors while a master is down must not turn a job into error (as in internal/e2e's
		// failover tests): what the soak counts is loss and reruns.
		"--max-failures", "50"}
	if root := testenv.RootFS(s.t); root != "" {
		args = append(args, "--rootfs", root)
	}
	s.workers = append(s.workers, w)
	w.cmd = exec.Command(workerBin, args...)
	w.cmd.Stderr = w.log
	// A test binary killed on its timeout runs no cleanup: the worker must go with it.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		s.t.Fatalf("start worker: %v", err)
	}
	go func() {
		_ = w.cmd.Wait()
		close(w.done)
	}()
	s.t.Cleanup(func() {
		w.kill()
		if s.t.Failed() {
			s.t.Logf("log of worker %s (last 100 lines):\n%s", id, lastLines(w.log.String(), 100))
		}
	})
	return w
}

// started waits until the worker logged that it started, and fails t if it exited first.
func (w *worker) started(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	return testenv.WaitFor(t, within, "worker "+w.id+" started", func() bool {
		select {
		case <-w.done:
			t.Fatalf("worker %s exited while starting:\n%s", w.id, lastLines(w.log.String(), 40))
		default:
		}
		return strings.Contains(w.log.String(), `"msg":"worker started"`)
	})
}

func (w *worker) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// linesAbout is every worker's log lines that name job id, for a settlement the test cannot
// explain: the last lines a failed test prints are long past it.
func (s *stack) linesAbout(id string) string {
	var out []string
	quoted := `"` + id + `"`
	for _, w := range s.workers {
		for line := range strings.Lines(w.log.String()) {
			if strings.Contains(line, quoted) {
				out = append(out, w.id+": "+strings.TrimRight(line, "\n"))
			}
		}
	}
	return strings.Join(out, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sample is a worker's resources at one moment, from its /metrics.
type sample struct {
	at         time.Duration // since the load began
	worker     string
	rss        int64
	goroutines int
	fds        int
	settled    int // settlements this process stored
}

// metricsClient keeps no connection open between samples: a worker SIGKILLed, or the test's end,
// leaves nothing behind.
var metricsClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (w *worker) sample(ctx context.Context, at time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addr+"/metrics", nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return sample{}, fmt.Errorf("metrics of %s: %w", w.id, err)
	}
	defer resp.Body.Close()
	sm := sample{at: at, worker: w.id}
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			sm.rss, seen = int64(v), seen+1
		case "go_goroutines":
			sm.goroutines, seen = int(v), seen+1
		case "process_open_fds":
			sm.fds, seen = int(v), seen+1
		case "runfleet_jobs_settled_total":
			sm.settled += int(v)
		}
	}
	if err := sc.Err(); err != nil {
		return sample{}, fmt.Errorf("metrics of %s: %w", w.id, err)
	}
	if seen != 3 {
		return sample{}, fmt.Errorf("metrics of %s lack the process and Go collectors' figures", w.id)
	}
	return sm, nil
}

func (sm sample) String() string {
	return fmt.Sprintf("%7s  %-10s  rss %6.1f MiB  goroutines %4d  fds %3d  settled %5d",
		sm.at.Round(time.Second), sm.worker, float64(sm.rss)/(1<<20), sm.goroutines, sm.fds, sm.settled)
}
