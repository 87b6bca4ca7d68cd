package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// workerBin is cmd/worker built with the fault points; submitBin is cmd/submit, the operator's tool.
var workerBin, submitBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runfleet-e2e-")
	if err != nil {
		panic(err)
	}
	if workerBin, err = testenv.BuildProgram(dir, "cmd/worker", "faults"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if submitBin, err = testenv.BuildProgram(dir, "cmd/submit"); err != nil {
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

type fleet struct {
	t      *testing.T
	nats   *testenv.NATS
	redis  *testenv.Redis
	client *runfleet.Client
	// tenants is the tenant of each job submitAs stored: a job is its tenant and its id.
	tenants sync.Map
	js      jetstream.JetStream
	dlog    string
	mu      sync.Mutex
	procs   []*worker
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	testenv.NeedRoot(t)
	return newFleetOn(t, testenv.StartNATS(t))
}

// newFleetOn is newFleet on the server n, whose URL the fleet's connections use, and makes its
// streams as a worker would.
func newFleetOn(t *testing.T, n *testenv.NATS) *fleet {
	t.Helper()
	testenv.NeedRoot(t)
	f := &fleet{t: t, nats: n, redis: testenv.StartRedis(t), dlog: filepath.Join(t.TempDir(), "dispatches")}
	nc := f.nats.Conn()
	var err error
	if f.client, err = runfleet.NewClient(t.Context(), nc, runfleet.Options{}); err != nil {
		t.Fatal(err)
	}
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := protocol.EnsureStreams(t.Context(), f.js, f.client.Subjects(), protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, w := range f.procs {
			w.kill()
		}
	})
	return f
}

// worker is one worker process.
type worker struct {
	id   string
	cmd  *exec.Cmd
	log  *testenv.Buffer
	done chan struct{}
	// exitedAt is when the process ended, read once done is closed.
	exitedAt time.Time
}

func (f *fleet) start(id string, extra ...string) *worker {
	f.t.Helper()
	return f.startWith(id, nil, extra...)
}

// startWith is start with setup applied to the command before it starts (inherited files, say).
func (f *fleet) startWith(id string, setup func(*exec.Cmd), extra ...string) *worker {
	f.t.Helper()
	args := append([]string{"--nats-url", f.nats.URL, "--redis-url", f.redis.URL, "--id", id,
		"--listen", "127.0.0.1:0", "--lease-ttl", "2s", "--concurrency", "2", "--dispatch-log", f.dlog,
		"--grace", "5s"}, extra...)
	if root := testenv.RootFS(f.t); root != "" {
		args = append(args, "--rootfs", root)
	}
	w := &worker{id: id, cmd: exec.Command(workerBin, args...), log: &testenv.Buffer{}, done: make(chan struct{})}
	w.cmd.Stderr = w.log
	if setup != nil {
		setup(w.cmd)
	}
	if err := w.cmd.Start(); err != nil {
		f.t.Fatalf("start worker: %v", err)
	}
	go func() {
		_ = w.cmd.Wait()
		w.exitedAt = time.Now()
		close(w.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, w)
	f.mu.Unlock()
	f.t.Cleanup(func() {
		if f.t.Failed() {
			f.t.Logf("log of worker %s:\n%s", id, w.logText())
		}
	})
	return w
}

func (w *worker) logText() string { return w.log.String() }

func (w *worker) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	<-w.done
}

func (w *worker) signal(s syscall.Signal) { _ = w.cmd.Process.Signal(s) }

// exited waits for the process to end on its own.
func (w *worker) exited(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(within):
		t.Fatalf("worker %s still running after %v", w.id, within)
	}
}

func (f *fleet) submit(req job.Request) string {
	f.t.Helper()
	s, err := f.client.Submit(f.t.Context(), "", req, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return s.ID
}

func (f *fleet) settlement(id string, within time.Duration) job.Settlement {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), within)
	defer cancel()
	st, err := f.clientOf(id).Watch(ctx, id, nil)
	if err != nil {
		f.t.Fatalf("no settlement of %s within %v: %v", id, within, err)
	}
	return st
}

// clientOf is a client of job id's tenant: the one submitAs recorded, else the default.
func (f *fleet) clientOf(id string) *runfleet.Client {
	tenant, ok := f.tenants.Load(id)
	if !ok {
		return f.client
	}
	in, err := runfleet.NewInspector(nil, runfleet.InspectorOptions{JetStream: f.js})
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := in.Tenant(tenant.(string))
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// settledCounts is how many settlement messages each job has stored.
func (f *fleet) settledCounts() map[string]int {
	f.t.Helper()
	s, err := f.js.Stream(f.t.Context(), "RUNFLEET_RESULTS")
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.t.Context(), jetstream.WithSubjectFilter("runfleet.results.*.*.settled"))
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for subj, n := range info.State.Subjects {
		out[strings.Split(subj, ".")[3]] = int(n)
	}
	return out
}

func (f *fleet) dispatches() map[string]int {
	f.t.Helper()
	n, err := sandbox.CountDispatches(f.dlog)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// results returns every message stored for job id, in order.
func (f *fleet) results(id string) []jetstream.RawStreamMsg {
	f.t.Helper()
	s, err := f.js.Stream(f.t.Context(), "RUNFLEET_RESULTS")
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(f.t.Context(), seq)
		if err != nil {
			continue
		}
		if strings.HasPrefix(m.Subject, "runfleet.results.default."+id+".") {
			out = append(out, *m)
		}
	}
	return out
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// queueDrained waits until every job message is acked: no redelivery can store anything more.
// The stream keeps the requests; the default tenant's consumer says what is left to deliver or ack.
func (f *fleet) queueDrained(within time.Duration) {
	f.t.Helper()
	testenv.WaitFor(f.t, within, "job messages acked", func() bool {
		s, _ := job.NewSubjects("")
		c, err := f.js.Consumer(f.t.Context(), s.JobsStream(), s.TenantConsumer(job.DefaultQueue, job.DefaultTenant))
		if err != nil {
			return false
		}
		info, err := c.Info(f.t.Context())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// dispatched waits until job id reached a sandbox.
func (f *fleet) dispatched(id string, within time.Duration) {
	f.t.Helper()
	testenv.WaitFor(f.t, within, "job "+id+" dispatched", func() bool { return f.dispatches()[id] > 0 })
}

// leftoverCgroups lists the sandbox cgroups of the worker process pid still on the host, on
// cgroup v1 (one tree per controller) and v2 (one tree) alike.
func leftoverCgroups(pid int) []string {
	var left []string
	prefix := fmt.Sprintf("p%d-", pid)
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) {
			left = append(left, path)
			return filepath.SkipDir
		}
		return nil
	})
	return left
}

// onlySupervisorsLeft reports whether the cgroups of worker pid's sandboxes hold no process but
// supervisors: every program in them has ended (a zombie is listed in no cgroup.procs).
func onlySupervisorsLeft(pid int, supervisors []int) bool {
	for _, dir := range leftoverCgroups(pid) {
		clean := true
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil // removed meanwhile
			}
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil && !slices.Contains(supervisors, p) {
					clean = false
					return filepath.SkipAll
				}
			}
			return nil
		})
		if !clean {
			return false
		}
	}
	return true
}

// artifactObjects names the objects of job id in the artifacts bucket.
func (f *fleet) artifactObjects(id string) []string {
	f.t.Helper()
	store, err := f.js.ObjectStore(f.t.Context(), "RUNFLEET_ARTIFACTS")
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	prefix := f.client.Tenant() + "/" + id + "/" // every attempt's objects (job.ArtifactObject)
	for _, name := range testenv.ObjectNames(f.t, store) {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}
