package gvisor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/gvisor"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

const fleet = "runfleet-test-gvisor"

func TestMain(m *testing.M) {
	containerinit.Init()
	providertest.ChildMain(func(ctx context.Context) (providertest.Env, func(), error) {
		initBin, err := testenv.DockerInit()
		if err != nil {
			return providertest.Env{}, nil, err
		}
		p, err := gvisor.New(ctx, docker.Options{Fleet: fleet, Worker: "providertest", InitBinary: initBin})
		if err != nil {
			return providertest.Env{}, nil, err
		}
		profiles, err := p.Resolve(ctx, profile.Builtin("", testenv.Image()))
		if err != nil {
			p.Close()
			return providertest.Env{}, nil, err
		}
		return providertest.Env{Provider: p, Profiles: profiles}, func() { p.Close() }, nil
	})
	goleak.VerifyTestMain(m)
}

// newProvider starts a provider whose init is the small sandbox init, closed with the test, and
// resolves the built-in profiles; it skips outside CI without runsc, the daemon's runsc runtime
// or the image.
func newProvider(t testing.TB, o docker.Options) (*gvisor.Provider, profile.Set) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		testenv.Missing(t, "runsc (apt-get install runsc): %v", err)
	}
	bin, err := testenv.DockerInit()
	if err != nil {
		t.Fatalf("static worker for the container init: %v", err)
	}
	o.Fleet, o.Worker, o.InitBinary = fleet, "providertest", bin
	p, err := gvisor.New(t.Context(), o)
	if err != nil {
		testenv.Missing(t, "docker daemon with the runsc runtime (scripts/setup test): %v", err)
	}
	t.Cleanup(func() { p.Close() })
	profiles, err := p.Resolve(t.Context(), profile.Builtin("", testenv.Image()))
	if err != nil {
		testenv.Missing(t, "sandbox image (make image): %v", err)
	}
	return p, profiles
}

// containerLeft reports the container with id, if the daemon still has it, its parent cgroups,
// and any runsc process (sandbox, gofer) still serving it.
func containerLeft(t *testing.T, id string) string {
	out, _ := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "id="+id).Output()
	left := strings.Fields(string(out))
	for _, pattern := range []string{filepath.Join("/sys/fs/cgroup", "*", fleet+"-docker", "*", id), filepath.Join("/sys/fs/cgroup", fleet+"-docker", "*", id)} {
		m, _ := filepath.Glob(pattern)
		left = append(left, m...)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), "runsc") && strings.Contains(string(b), id) {
			left = append(left, "runsc process "+filepath.Base(filepath.Dir(f)))
		}
	}
	return strings.Join(left, " ")
}

func TestConformance(t *testing.T) {
	dlog := filepath.Join(t.TempDir(), "dispatch.log")
	p, profiles := newProvider(t, docker.Options{DispatchLog: sandbox.DispatchLog{Path: dlog}})
	secret := "runfleet-secret-gvisor"
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	providertest.Run(t, providertest.Env{
		Provider:      p,
		Profiles:      profiles,
		Secret:        secret,
		MeasuresUsage: true,
		Leftovers:     containerLeft,
		DispatchLog:   dlog,
		Differs:       gvisor.Differs,
	})
	if n, err := p.Reap(t.Context()); err != nil || n != 0 {
		t.Errorf("Reap() = %d, %v; want nothing left to reap", n, err)
	}
}

// BenchmarkAgainstDocker: the same steps and the same warm-pool throughput on the Docker
// provider (runc) and on gVisor, in one run, so that the figures compare on a noisy machine.
// go test -run '^$' -bench AgainstDocker -benchtime 30x ./fleet/internal/providers/gvisor/
func BenchmarkAgainstDocker(b *testing.B) {
	gv, profiles := newProvider(b, docker.Options{})
	bin, err := testenv.DockerInit()
	if err != nil {
		b.Fatal(err)
	}
	dk, err := docker.New(b.Context(), docker.Options{Fleet: fleet, Worker: "providertest", InitBinary: bin})
	if err != nil {
		b.Fatal(err)
	}
	defer dk.Close()
	for _, p := range []sandbox.Provider{dk, gv} {
		e := providertest.Env{Provider: p, Profiles: profiles}
		b.Run(p.Name()+"/steps", func(b *testing.B) { providertest.BenchSteps(b, e, "python3", "pass") })
		b.Run(p.Name()+"/pool", func(b *testing.B) { providertest.BenchPool(b, e, 2) })
	}
}
