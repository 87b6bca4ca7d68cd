package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// natsNode is one nats-server process of a 3-node JetStream cluster on loopback.
type natsNode struct {
	name string
	args []string
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *natsNode) start(t *testing.T, bin string) {
	t.Helper()
	n.cmd = exec.Command(bin, n.args...)
	n.done = make(chan struct{})
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.cmd, n.done)
}

func (n *natsNode) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// startCluster builds nats-server from the module's own version and starts three nodes.
func startCluster(t *testing.T) []*natsNode {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	var client, cluster [3]int
	for i := range 3 {
		client[i], cluster[i] = testenv.FreePortNumber(), testenv.FreePortNumber()
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cluster[i]))
	}
	nodes := make([]*natsNode, 3)
	for i := range 3 {
		n := &natsNode{name: fmt.Sprintf("n%d", i), url: fmt.Sprintf("nats://127.0.0.1:%d", client[i])}
		n.args = []string{"--server_name", n.name, "-a", "127.0.0.1", "-p", fmt.Sprint(client[i]),
			"--jetstream", "--store_dir", filepath.Join(t.TempDir(), n.name),
			"--cluster_name", "rfe2e", "--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		n.start(t, bin)
		nodes[i] = n
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	return nodes
}

// streamLeader is the node that leads stream name.
func streamLeader(t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Cluster.Leader
}

// TestNodeLossKeepsEveryJob runs 100 jobs on two workers connected to different nodes of a
// 3-node cluster and SIGKILLs the node leading the results stream while they run, then restarts
// it: the streams are raised to three replicas by the workers, and every job settles once with
// its real outcome, having run once.
func TestNodeLossKeepsEveryJob(t *testing.T) {
	testenv.NeedRoot(t)
	nodes := startCluster(t)
	all := []string{nodes[0].url, nodes[1].url, nodes[2].url}
	// Connected at once, and the cluster found once the JetStream API answers: the nodes start
	// in the background.
	nc, err := nats.Connect(strings.Join(all, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var client *runfleet.Client
	deadline := time.Now().Add(time.Minute) // a loaded machine elects the meta leader slowly
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		client, err = runfleet.NewClient(ctx, nc, runfleet.Options{})
		if err == nil {
			err = protocol.EnsureStreams(ctx, js, client.Subjects(), protocol.StreamOptions{}) // one replica, as an older fleet made them
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	f := &fleet{t: t, nats: &testenv.NATS{URL: nodes[0].url}, redis: testenv.StartRedis(t), client: client, js: js,
		dlog: filepath.Join(t.TempDir(), "dispatches")}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, w := range f.procs {
			w.kill()
		}
	})
	workers := []*worker{
		f.start("c-a", "--nats-url", nodes[0].url, "--stream-replicas", "3", "--lease-ttl", "3s"),
		f.start("c-b", "--nats-url", nodes[1].url, "--stream-replicas", "3", "--lease-ttl", "3s"),
	}
	for _, w := range workers {
		waitLog(t, w, `"worker started"`, time.Minute)
	}
	s, _ := job.NewSubjects("")
	// The artifacts bucket is a stream too (OBJ_<bucket>), raised with the others.
	for _, name := range []string{s.JobsStream(), s.ResultsStream(), s.ControlStream(), "OBJ_" + s.ArtifactsBucket()} {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas after the workers started with --stream-replicas 3", name, r)
		}
	}
	// Raising takes effect once the new replicas caught up (about 10 s here), the queue's durable
	// discovery consumer following its stream: the node is killed only then.
	waitReplicated(t, js, s.JobsStream(), s.Discovery(job.DefaultQueue), 2*time.Minute)
	waitReplicated(t, js, s.ResultsStream(), "", 2*time.Minute)
	if err := protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if r := streamReplicas(t, js, s.ResultsStream()); r != 3 {
		t.Fatalf("results stream lowered to %d replicas by a fleet asking for 1", r)
	}
	if r := streamReplicas(t, js, "OBJ_"+s.ArtifactsBucket()); r != 3 {
		t.Fatalf("artifacts bucket lowered to %d replicas by a fleet asking for 1", r)
	}

	const jobs = 100
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = f.submit(job.Request{Language: "python3", Code: fmt.Sprintf("import time; time.sleep(0.2); print(%d)", i)})
	}
	// The victim leads the results stream: its pages and settlements are the writes that fail.
	leader := streamLeader(t, js, s.ResultsStream())
	var victim *natsNode
	for _, n := range nodes {
		if n.name == leader {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("results stream leader %q is none of the nodes", leader)
	}
	waitSettled(t, f, ids, 15, 2*time.Minute)
	killedAt := time.Now()
	victim.kill()
	t.Logf("SIGKILLed %s, the results stream's leader", victim.name)
	waitSettled(t, f, ids, 50, 2*time.Minute)
	victim.start(t, victim.cmd.Path)
	t.Logf("restarted %s after %v", victim.name, time.Since(killedAt).Round(time.Millisecond))

	var mu sync.Mutex
	got := map[string]job.Status{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			st := f.settlement(id, 3*time.Minute)
			mu.Lock()
			got[id] = st.Status
			mu.Unlock()
		})
	}
	wg.Wait()
	counts, dispatches := f.settledCounts(), f.dispatches()
	took := map[string]int{}
	for _, id := range ids {
		if got[id] != job.StatusSucceeded {
			t.Errorf("job %s settled %s, want succeeded", id, got[id])
		}
		if counts[id] != 1 {
			t.Errorf("job %s has %d settlements, want 1", id, counts[id])
		}
		if dispatches[id] != 1 {
			t.Errorf("job %s dispatched %d times, want 1", id, dispatches[id])
		}
	}
	for _, w := range workers {
		log := w.logText()
		took[w.id] = strings.Count(log, `"msg":"settled"`)
		for line := range strings.Lines(log) {
			if strings.Count(line, `"worker":`) > 1 {
				t.Errorf("worker %s logged a line with its key twice: %s", w.id, line)
				break
			}
		}
	}
	t.Logf("settled per worker: %v", took)
}

// waitReplicated waits until stream name, and its consumer when named, have two current peers
// besides their leader.
func waitReplicated(t *testing.T, js jetstream.JetStream, name, consumer string, within time.Duration) {
	t.Helper()
	current := func(c *jetstream.ClusterInfo) bool {
		if c == nil || c.Leader == "" || len(c.Replicas) != 2 {
			return false
		}
		for _, p := range c.Replicas {
			if !p.Current {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(within)
	for {
		ok := false
		if st, err := js.Stream(t.Context(), name); err == nil && current(st.CachedInfo().Cluster) {
			ok = consumer == ""
			if c, err := st.Consumer(t.Context(), consumer); err == nil && current(c.CachedInfo().Cluster) {
				ok = true
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s (consumer %q) not replicated three times within %v", name, consumer, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func streamReplicas(t *testing.T, js jetstream.JetStream, name string) int {
	t.Helper()
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config.Replicas
}

// waitLog waits until w's log holds s.
func waitLog(t *testing.T, w *worker, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(w.logText(), s) {
		select {
		case <-w.done:
			t.Fatalf("worker %s exited:\n%s", w.id, w.logText())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s: no %s within %v", w.id, s, within)
		}
	}
}

// waitSettled waits until at least n of ids have a settlement stored.
func waitSettled(t *testing.T, f *fleet, ids []string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		count, err := settledAmong(ctx, f.js, ids)
		cancel()
		if err == nil && count >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs settled within %v (want %d): %v", count, len(ids), within, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func settledAmong(ctx context.Context, js jetstream.JetStream, ids []string) (int, error) {
	s, err := js.Stream(ctx, "RUNFLEET_RESULTS")
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("runfleet.results.*.*.settled"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if info.State.Subjects["runfleet.results.default."+id+".settled"] > 0 {
			n++
		}
	}
	return n, nil
}
