package pool_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestMain(m *testing.M) {
	namespace.Init()
	goleak.VerifyTestMain(m)
}

// counting passes creations to a real provider and counts them, and how many ran at once.
type counting struct {
	p        sandbox.Provider
	calls    atomic.Int64
	inFlight atomic.Int64
	mu       sync.Mutex
	most     int64
}

func (c *counting) Create(ctx context.Context, s sandbox.Shape) (sandbox.Sandbox, error) {
	c.calls.Add(1)
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	c.mu.Lock()
	c.most = max(c.most, n)
	c.mu.Unlock()
	return c.p.Create(ctx, s)
}

type env struct {
	creator *counting
	state   string // the provider's mount points: one directory per sandbox alive (and per zygote)
	shape   sandbox.Shape
}

func newEnv(t *testing.T) env {
	t.Helper()
	testenv.NeedRoot(t)
	state := t.TempDir()
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: state, UIDBase: 410000,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids")})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return env{creator: &counting{p: p}, state: state, shape: providertest.Shape(profile.Builtin(testenv.RootFS(t), "")["python3"])}
}

// alive counts the sandboxes the provider holds, waiting or running.
func (e env) alive(t *testing.T) int {
	entries, err := os.ReadDir(e.state)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), "ns-") {
			n++
		}
	}
	return n
}

// start runs p until the test ends, and returns a stop that ends Run and waits for it.
func start(t *testing.T, p *pool.Pool) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	stop = func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(stop)
	return stop
}

func runPass(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	defer sb.Destroy(context.WithoutCancel(t.Context()))
	if err := sb.Assign(t.Context(), providertest.Job(t.Name())); err != nil {
		t.Fatal(err)
	}
	payload, _ := profile.Payload(job.Request{Code: "print('ok')"})
	var out bytes.Buffer
	if exit, err := sb.Run(t.Context(), bytes.NewReader(payload), &out, &bytes.Buffer{}); err != nil || exit.Code != 0 || out.String() != "ok\n" {
		t.Errorf("Run() = %+v, %v, stdout %q; want ok", exit, err, out.String())
	}
}

// TestTakeWarmThenRefill: a take is served by a waiting sandbox, the pool refills behind it,
// and a shape no waiting sandbox fits is created for the job.
func TestTakeWarmThenRefill(t *testing.T) {
	e := newEnv(t)
	p := pool.New(e.creator, []sandbox.Shape{e.shape}, pool.Options{Size: 2})
	start(t, p)
	testenv.WaitFor(t, time.Minute, "two waiting sandboxes", func() bool { return p.WaitingFor("python3") == 2 })
	sb, warm, err := p.Take(t.Context(), e.shape)
	if err != nil || !warm {
		t.Fatalf("Take() = %v, %v; want a warm sandbox", warm, err)
	}
	runPass(t, sb)
	testenv.WaitFor(t, time.Minute, "the pool refilled", func() bool { return p.WaitingFor("python3") == 2 })

	other := e.shape
	other.TmpBytes *= 2
	sb, warm, err = p.Take(t.Context(), other)
	if err != nil || warm {
		t.Fatalf("Take() of another shape = %v, %v; want one created cold", warm, err)
	}
	runPass(t, sb)
	if got := p.WaitingFor("python3"); got != 2 {
		t.Errorf("WaitingFor() = %d after a cold take, want 2 untouched", got)
	}
}

// TestRunDestroysAll: when Run returns, no sandbox of the pool is left, however many waited.
func TestRunDestroysAll(t *testing.T) {
	e := newEnv(t)
	p := pool.New(e.creator, []sandbox.Shape{e.shape}, pool.Options{Size: 3, Refills: 2})
	stop := start(t, p)
	testenv.WaitFor(t, time.Minute, "three waiting sandboxes", func() bool { return p.WaitingFor("python3") == 3 })
	stop()
	if n := e.alive(t); n != 0 || p.Waiting() != 0 {
		t.Errorf("after Run returned: %d sandboxes alive, %d waiting; want none", n, p.Waiting())
	}
	// A take after Run creates its own.
	sb, warm, err := p.Take(t.Context(), e.shape)
	if err != nil || warm {
		t.Fatalf("Take() after Run = %v, %v; want one created cold", warm, err)
	}
	runPass(t, sb)
}

// TestRefillsBounded: however short the pool is, it creates at most Refills at once.
func TestRefillsBounded(t *testing.T) {
	e := newEnv(t)
	p := pool.New(e.creator, []sandbox.Shape{e.shape}, pool.Options{Size: 4, Refills: 1})
	start(t, p)
	testenv.WaitFor(t, time.Minute, "four waiting sandboxes", func() bool { return p.WaitingFor("python3") == 4 })
	for range 4 {
		sb, _, err := p.Take(t.Context(), e.shape)
		if err != nil {
			t.Fatal(err)
		}
		runPass(t, sb)
	}
	testenv.WaitFor(t, time.Minute, "four waiting sandboxes again", func() bool { return p.WaitingFor("python3") == 4 })
	e.creator.mu.Lock()
	defer e.creator.mu.Unlock()
	if e.creator.most != 1 {
		t.Errorf("%d creations ran at once, want at most Refills = 1", e.creator.most)
	}
}

// TestMaxAge: a sandbox that waited MaxAge is destroyed and replaced, though no job came.
func TestMaxAge(t *testing.T) {
	e := newEnv(t)
	p := pool.New(e.creator, []sandbox.Shape{e.shape}, pool.Options{Size: 1, MaxAge: 500 * time.Millisecond})
	start(t, p)
	testenv.WaitFor(t, time.Minute, "three sandboxes made for one place", func() bool { return e.creator.calls.Load() >= 3 })
	if n := e.alive(t); n > 3 {
		t.Errorf("%d sandboxes alive for a pool of 1 with one refill at a time, want at most 3 (one waiting, one made, one retired)", n)
	}
}

// TestDisabled: Size 0 keeps nothing waiting; every take creates.
func TestDisabled(t *testing.T) {
	e := newEnv(t)
	p := pool.New(e.creator, []sandbox.Shape{e.shape}, pool.Options{})
	start(t, p)
	sb, warm, err := p.Take(t.Context(), e.shape)
	if err != nil || warm {
		t.Fatalf("Take() = %v, %v; want one created cold", warm, err)
	}
	runPass(t, sb)
	if n := e.creator.calls.Load(); n != 1 || p.Waiting() != 0 {
		t.Errorf("%d creations, %d waiting; want only the take's", n, p.Waiting())
	}
}
