package runfleet_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the examples against a real fleet: `worker --dev` (embedded JetStream, a child
// redis-server, namespace sandboxes), built from this workspace and reached through NATS_URL, the
// variable the examples read. The root module imports no server code, so a service that imports
// the client pulls in only nats.go: the fleet is started as a program, not linked.
//
// Without a fleet, CI fails; elsewhere each test skips by name through dial, and the examples,
// which cannot skip, are left out and listed as skipped in the output.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		url, stop, err := startDevWorker()
		if err != nil {
			fleetMissing = fmt.Sprintf("a dev worker (root, redis-server, the sandbox root fs): %v", err)
			if os.Getenv("CI") == "true" {
				fmt.Fprintf(os.Stderr, "missing in CI: %s\n", fleetMissing)
				return 1
			}
			flag.Parse()
			if err := skipExamples("missing: " + fleetMissing); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			return m.Run()
		}
		defer stop()
		os.Setenv("NATS_URL", url)
		return m.Run()
	}())
}

// fleetMissing says what the tests lack when no dev worker could start.
var fleetMissing string

// needFleet skips t, naming what is missing, when no dev worker could start.
func needFleet(t testing.TB) {
	t.Helper()
	if fleetMissing != "" {
		t.Skipf("missing: %s (set up with `make test`)", fleetMissing)
	}
}

// skipExamples leaves the package's examples out of the run (-test.skip) and names them.
func skipExamples(reason string) error {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		return err
	}
	run, err := regexp.Compile(flag.Lookup("test.run").Value.String())
	if err != nil {
		return err
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") && run.MatchString(fn.Name.Name) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	skip := `^Example`
	if s := flag.Lookup("test.skip").Value.String(); s != "" {
		skip = s + "|" + skip
	}
	if err := flag.Set("test.skip", skip); err != nil {
		return err
	}
	for _, n := range names {
		fmt.Printf("--- SKIP: %s\n    %s\n", n, reason)
	}
	return nil
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
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/runfleet/runfleet/fleet/cmd/worker").CombinedOutput(); err != nil {
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
	// A test binary killed on its timeout runs no cleanup: the worker must go with it.
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
