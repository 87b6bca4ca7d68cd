package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

const apiKey = "test-key-Ω"

var workerBin, gatewayBin string

// TestMain builds the real worker and gateway once; tests run them as processes.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runfleet-gateway-")
	if err != nil {
		panic(err)
	}
	if workerBin, err = testenv.BuildProgram(dir, "cmd/worker"); err == nil {
		gatewayBin, err = testenv.BuildProgram(dir, "cmd/gateway")
	}
	if err != nil {
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

// fleet is an embedded JetStream, a redis-server, and a gateway in this process; start adds a
// worker process.
type fleet struct {
	t      testing.TB
	nats   *testenv.NATS
	redis  *testenv.Redis
	prefix string
	gw     *gateway.Gateway
	gwConn *nats.Conn // the gateway's own connection
	srv    *httptest.Server
	client *runfleet.Client
	js     jetstream.JetStream
	kv     jetstream.KeyValue // the tenants bucket, which the gateway follows
	// tenants is the gateway's view of the bucket. The fleet declares queues idle and
	// nobody-serves, which no worker serves, for the tests that store jobs nothing runs.
	tenants *tenant.Policies
}

func newFleet(t testing.TB, o gateway.Options) *fleet {
	t.Helper()
	f := &fleet{t: t, nats: testenv.StartNATS(t), prefix: "gw-" + uuid.NewString()[:8]}
	nc := f.nats.Conn()
	var err error
	if f.client, err = runfleet.NewClient(t.Context(), nc, runfleet.Options{Prefix: f.prefix}); err != nil {
		t.Fatal(err)
	}
	o.APIKey, o.Prefix = apiKey, f.prefix
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	// The gateway follows the tenants bucket as cmd/gateway does.
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if f.kv, err = tenant.EnsureBucket(t.Context(), f.js, f.client.Subjects(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.UpdateQueues(t.Context(), f.kv, func(q *protocol.Queues) error {
		q.Queues["idle"], q.Queues["nobody-serves"] = protocol.QueueDeclaration{}, protocol.QueueDeclaration{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	o.Tenants = &tenant.Policies{}
	f.tenants = o.Tenants
	ctx, stop := context.WithCancel(context.Background())
	var follow sync.WaitGroup
	follow.Go(func() { _ = o.Tenants.Follow(ctx, f.kv, o.Logger) })
	t.Cleanup(func() { stop(); follow.Wait() })
	select {
	case <-o.Tenants.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the tenants bucket was not read within 10 s")
	}
	f.gwConn = f.nats.Conn()
	if f.gw, err = gateway.New(t.Context(), f.gwConn, o); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.gw.Handler())
	t.Cleanup(f.gw.Close)
	t.Cleanup(f.srv.Close)
	return f
}

// startWorker runs a real worker process with the namespace provider and waits until it serves;
// the test may kill the process it returns.
func (f *fleet) startWorker(extra ...string) *os.Process {
	f.t.Helper()
	testenv.NeedRoot(f.t)
	if f.redis == nil {
		f.redis = testenv.StartRedis(f.t)
	}
	args := append([]string{"--nats-url", f.nats.URL, "--redis-url", f.redis.URL, "--prefix", f.prefix,
		"--id", f.prefix + "-w", "--listen", "127.0.0.1:0", "--provider", "namespace", "--concurrency", "2",
		"--grace", "5s"}, extra...)
	if root := testenv.RootFS(f.t); root != "" {
		args = append(args, "--rootfs", root)
	}
	log := &testenv.Buffer{}
	cmd := exec.Command(workerBin, args...)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start worker: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	f.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if f.t.Failed() {
			f.t.Logf("worker log:\n%s", log.String())
		}
	})
	testenv.WaitFor(f.t, 60*time.Second, "worker started", func() bool {
		select {
		case <-done:
			f.t.Fatalf("worker exited:\n%s", log.String())
		default:
		}
		return strings.Contains(log.String(), `"worker started"`)
	})
	return cmd.Process
}

// waitAnnounced waits until a serving worker announces language to the gateway (the piston and
// judge0 routes' languages): a worker answers pings from its heartbeat, which starts beside its
// "worker started" line, not before it.
func (f *fleet) waitAnnounced(language string) {
	f.t.Helper()
	testenv.WaitFor(f.t, 10*time.Second, "a worker announces "+language, func() bool {
		code, b := f.do("GET", "/api/v2/runtimes", apiKey, nil)
		return code == http.StatusOK && strings.Contains(string(b), `"language":"`+language+`"`)
	})
}

// do sends a request with the API key as X-Api-Key (key "" sends none) and returns the status
// and body.
func (f *fleet) do(method, path, key string, body []byte, hdr ...string) (int, []byte) {
	f.t.Helper()
	resp := f.send(f.t.Context(), method, path, key, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func (f *fleet) send(ctx context.Context, method, path, key string, body []byte, hdr ...string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// post submits body natively and returns the status and the decoded answer.
func (f *fleet) post(query string, body string) (int, map[string]any) {
	f.t.Helper()
	code, b := f.do("POST", "/v1/jobs"+query, apiKey, []byte(body))
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		f.t.Fatalf("POST /v1/jobs%s = %d %q: not JSON: %v", query, code, b, err)
	}
	return code, out
}

// settle waits for job id's settlement through the Go client.
func (f *fleet) settle(id string) job.Settlement {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 60*time.Second)
	defer cancel()
	c := f.client
	// A job is its tenant and its id: follow it through its tenant's client, the one tenant whose
	// request of the id is stored.
	in, err := runfleet.NewInspector(f.nats.Conn(), runfleet.InspectorOptions{Prefix: f.prefix})
	if err != nil {
		f.t.Fatal(err)
	}
	if tenants, err := in.Tenants(ctx, id); err != nil || len(tenants) > 1 {
		f.t.Fatalf("the tenants of job %s: %v %v", id, tenants, err)
	} else if len(tenants) == 1 {
		if c, err = in.Tenant(tenants[0]); err != nil {
			f.t.Fatal(err)
		}
	}
	st, err := c.Watch(ctx, id, nil)
	if err != nil {
		f.t.Fatalf("settlement of %s: %v", id, err)
	}
	return st
}

// event is one server-sent event.
type event struct {
	ID, Name, Data string
}

// readEvents parses a text/event-stream until it ends or an event named until arrives.
func readEvents(t testing.TB, r io.Reader, until string) []event {
	t.Helper()
	var out []event
	var cur event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" || cur.Data != "" {
				out = append(out, cur)
				if cur.Name == until {
					return out
				}
			}
			cur = event{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data += strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// process is the gateway binary running against the fleet.
type process struct {
	URL  string
	cmd  *exec.Cmd
	log  *testenv.Buffer
	done chan struct{}
}

// startBinary runs bin/gateway (built by TestMain) on a free port and waits until it serves.
func (f *fleet) startBinary(extra ...string) *process {
	f.t.Helper()
	p := &process{log: &testenv.Buffer{}, done: make(chan struct{})}
	args := append([]string{"--listen", "127.0.0.1:0", "--nats-url", f.nats.URL, "--prefix", f.prefix}, extra...)
	p.cmd = exec.Command(gatewayBin, args...)
	p.cmd.Env = append(os.Environ(), "RUNFLEET_API_KEY="+apiKey)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		f.t.Fatalf("start gateway: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	f.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if f.t.Failed() {
			f.t.Logf("gateway log:\n%s", p.log.String())
		}
	})
	testenv.WaitFor(f.t, 30*time.Second, "gateway started", func() bool {
		select {
		case <-p.done:
			f.t.Fatalf("gateway exited:\n%s", p.log.String())
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(p.log.String()))
		for sc.Scan() {
			var line struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gateway started" {
				p.URL = "http://" + line.Listen
				return true
			}
		}
		return false
	})
	return p
}

// consumers is how many consumers the fleet's results stream holds: one per live watch.
func (f *fleet) consumers() int {
	f.t.Helper()
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), f.client.Subjects().ResultsStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.Consumers
}

// holdWaiting opens n connections to the gateway at addr, each with a request waiting for a job
// on a queue that no worker serves; closing a connection ends its request.
func holdWaiting(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		body := fmt.Sprintf(`{"id":"held-%d-%d","language":"python3","code":"print(1)"}`, i, time.Now().UnixNano())
		fmt.Fprintf(c, "POST /v1/jobs?wait=true&queue=idle HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			addr, apiKey, len(body), body)
	}
	return conns
}
