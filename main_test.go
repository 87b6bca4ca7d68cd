package runfleet_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain runs the examples against a real fleet: `worker --dev` (embedded JetStream, a child
// redis-server, namespace sandboxes), built from this workspace and reached through NATS_URL, the
// variable the examples read. The root module imports no server code, so a service that imports
// the client pulls in only nats.go: the fleet is started as a program, not linked.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		url, stop, err := startDevWorker()
		if err != nil {
			fmt.Fprintf(os.Stderr, "runfleet examples need a dev worker (root, redis-server, the sandbox root fs): %v\n", err)
			if os.Getenv("CI") == "true" {
				return 1
			}
			fmt.Fprintln(os.Stderr, "skipping the examples outside CI")
			return 0
		}
		defer stop()
		os.Setenv("NATS_URL", url)
		return m.Run()
	}())
}

func startDevWorker() (url string, stop func(), err error) {
	if os.Geteuid() != 0 {
		return "", nil, fmt.Errorf("not root")
	}
	dir, err := os.MkdirTemp("", "runfleet-examples-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/runfleet/runfleet/cmd/worker").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build worker: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	url = "nats://" + l.Addr().String()
	l.Close()
	w := exec.Command(bin, "--dev", "--nats-url", url, "--listen", "127.0.0.1:0", "--concurrency", "2")
	log := &lockedBuffer{}
	w.Stderr = log
	if err := w.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		_ = w.Process.Kill()
		_ = w.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), `"worker started"`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("worker did not start:\n%s", log.String())
		}
	}
	return url, stop, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
