package docker_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

const fleet = "runfleet-test"

func TestMain(m *testing.M) {
	containerinit.Init()
	providertest.ChildMain(func(ctx context.Context) (providertest.Env, func(), error) {
		initBin, err := testenv.DockerInit()
		if err != nil {
			return providertest.Env{}, nil, err
		}
		p, err := docker.New(ctx, docker.Options{Fleet: fleet, Worker: "providertest", InitBinary: initBin})
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

func newProvider(t testing.TB) (*docker.Provider, profile.Set) {
	t.Helper()
	return newProviderLogged(t, "")
}

// newProviderLogged is newProvider with a dispatch log at path.
func newProviderLogged(t testing.TB, path string) (*docker.Provider, profile.Set) {
	t.Helper()
	return newProviderWith(t, docker.Options{Fleet: fleet, Worker: "providertest", DispatchLog: sandbox.DispatchLog{Path: path}})
}

// newProviderWith starts a provider with o, its init by default the small sandbox init, closed with the
// test, and resolves the built-in profiles; it skips outside CI without a daemon or the image.
func newProviderWith(t testing.TB, o docker.Options) (*docker.Provider, profile.Set) {
	t.Helper()
	o.InitBinary = cmp.Or(o.InitBinary, staticInit(t))
	p, err := docker.New(t.Context(), o)
	if err != nil {
		testenv.Missing(t, "docker daemon: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	profiles, err := p.Resolve(t.Context(), profile.Builtin("", testenv.Image()))
	if err != nil {
		testenv.Missing(t, "sandbox image (make image): %v", err)
	}
	return p, profiles
}

// staticInit is the static worker the provider runs as its containers' init.
func staticInit(t testing.TB) string {
	t.Helper()
	bin, err := testenv.DockerInit()
	if err != nil {
		t.Fatalf("static worker for the container init: %v", err)
	}
	return bin
}

// containerLeft reports the container with id, if the daemon still has it, and its parent
// cgroups on either hierarchy (v1: one per controller; v2: one).
func containerLeft(t *testing.T, id string) string {
	out, _ := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "id="+id).Output()
	left := strings.Fields(string(out))
	for _, pattern := range []string{filepath.Join("/sys/fs/cgroup", "*", fleet+"-docker", "*", id), filepath.Join("/sys/fs/cgroup", fleet+"-docker", "*", id)} {
		m, _ := filepath.Glob(pattern)
		left = append(left, m...)
	}
	return strings.Join(left, " ")
}

func TestConformance(t *testing.T) {
	dlog := filepath.Join(t.TempDir(), "dispatch.log")
	p, profiles := newProviderLogged(t, dlog)
	secret := "runfleet-secret-docker"
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	providertest.Run(t, providertest.Env{
		Provider:      p,
		Profiles:      profiles,
		Secret:        secret,
		MeasuresUsage: true,
		Leftovers:     containerLeft,
		DispatchLog:   dlog,
	})
	if n, err := p.Reap(t.Context()); err != nil || n != 0 {
		t.Errorf("Reap() = %d, %v; want nothing left to reap", n, err)
	}
}

// TestKilledWorker: a container never outlives its SIGKILLed worker by more than 2 s (G5): its
// init ends it when the worker's attach connection closes.
func TestKilledWorker(t *testing.T) {
	p, _ := newProvider(t)
	providertest.RunKilledWorker(t, func(t *testing.T, id string) string {
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{.State.Pid}}", id).Output()
		if err != nil {
			return "" // removed
		}
		if f := strings.Fields(string(out)); len(f) == 2 && f[0] == "true" {
			return "container running, pid " + f[1]
		}
		return ""
	})
	// The dead worker's stopped container is the reaper's: no live worker tracks it.
	if _, err := p.Reap(t.Context()); err != nil {
		t.Errorf("Reap() error = %v", err)
	}
}

// BenchmarkCycle: go test -bench Cycle -benchtime 20x ./internal/providers/docker/
func BenchmarkCycle(b *testing.B) {
	p, profiles := newProvider(b)
	providertest.BenchCycle(b, providertest.Env{Provider: p, Profiles: profiles},
		[]string{"docker", "run", "--rm", "--network", "none", testenv.Image(), "/usr/bin/python3", "-c", "pass"})
}

// TestFailedDestroyReaped: a container whose removal failed is not tracked as live: the reaper
// removes it, with its parent cgroup.
func TestFailedDestroyReaped(t *testing.T) {
	p, profiles := newProvider(t)
	sb, err := p.Create(t.Context(), providertest.Shape(profiles["python3"]))
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := sb.Destroy(canceled); err == nil {
		t.Fatal("Destroy() with a canceled context = nil, want an error")
	}
	if left := containerLeft(t, sb.ID()); left == "" {
		t.Fatal("nothing left after a failed Destroy: the test cannot show the reaper")
	}
	if n, err := p.Reap(t.Context()); n != 1 || err != nil {
		t.Errorf("Reap() = %d, %v; want the container removed", n, err)
	}
	if left := containerLeft(t, sb.ID()); left != "" {
		t.Errorf("after Reap, left on the host: %s", left)
	}
}

// TestDestroyLeavesTheRemovalOffTheJobsPath: once the program has ended and its output is read,
// Destroy returns without waiting for the daemon to remove the container (about 100 ms, the
// largest part of a trivial job's time after the warm pool); the removal counts as pending until
// it is done, and Close waits for it.
func TestDestroyLeavesTheRemovalOffTheJobsPath(t *testing.T) {
	p, profiles := newProvider(t)
	release := docker.BlockRemovals(p)
	defer release()
	sb := providertest.Create(t.Context(), t, providertest.Env{Provider: p, Profiles: profiles}, profiles["python3"], nil)
	payload, _ := profile.Payload(job.Request{Code: "print(1)"})
	var out strings.Builder
	if exit, err := sb.Run(t.Context(), strings.NewReader(string(payload)), &out, io.Discard); err != nil || exit.Code != 0 || out.String() != "1\n" {
		t.Fatalf("Run() = %+v, %v, stdout %q; want exit 0, 1", exit, err, out.String())
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- sb.Destroy(t.Context()) }()
	select {
	case err := <-destroyed:
		if err != nil {
			t.Fatalf("Destroy() error = %v", err)
		}
	case <-time.After(30 * time.Second):
		release()
		t.Fatal("Destroy() of an ended sandbox waited for the container's removal")
	}
	if got := p.PendingRemovals(); got != 1 {
		t.Errorf("PendingRemovals() = %d, want 1 while the removal is held", got)
	}
	if left := containerLeft(t, sb.ID()); left == "" {
		t.Error("container gone while its removal is held")
	}
	release()
	if err := p.WaitRemovals(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := containerLeft(t, sb.ID()); left != "" {
		t.Errorf("after the removal, left on the host: %s", left)
	}
}

// TestInitUnreadable: the program may see its container's init but not read it: an execute-only
// copy of the worker's executable.
func TestInitUnreadable(t *testing.T) {
	p, profiles := newProvider(t)
	r := providertest.Exec(t.Context(), t, providertest.Env{Provider: p, Profiles: profiles},
		job.Request{Language: "python3", Code: "try:\n    print(len(open('/.runfleet/init', 'rb').read(64)))\nexcept OSError as e:\n    print(e.errno)"}, nil)
	if r.Stdout != "13\n" {
		t.Errorf("reading the init printed %q, want 13 (EACCES); stderr %q", r.Stdout, r.Stderr)
	}
}

// TestInitIgnoresPreload: the program runs the init itself with LD_PRELOAD naming a library it
// wrote, whose constructor would run inside the execute-only init and could copy it out of its
// own memory. The init is static: no loader runs, and the library is never loaded.
func TestInitIgnoresPreload(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.Missing(t, "gcc: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "preload.c")
	lib := filepath.Join(dir, "preload.so")
	if err := os.WriteFile(src, []byte("#include <fcntl.h>\n#include <unistd.h>\n"+
		"__attribute__((constructor)) static void in_init(void) {\n"+
		"\tint fd = open(\"/workspace/preloaded\", O_CREAT | O_WRONLY, 0644);\n\tif (fd >= 0) close(fd);\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	so, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	p, profiles := newProvider(t)
	// The library is a memfd: /workspace and /tmp are mounted noexec, a memfd is not.
	code := "import base64, os, subprocess\n" +
		"fd = os.memfd_create('preload', 0)\nos.write(fd, base64.b64decode('" + base64.StdEncoding.EncodeToString(so) + "'))\n" +
		"subprocess.run(['/.runfleet/init', '/usr/bin/true'], env={'LD_PRELOAD': '/proc/self/fd/%d' % fd}, pass_fds=[fd], stderr=subprocess.DEVNULL)\n" +
		"print('preloaded' if os.path.exists('/workspace/preloaded') else 'not loaded')"
	r := providertest.Exec(t.Context(), t, providertest.Env{Provider: p, Profiles: profiles}, job.Request{Language: "python3", Code: code}, nil)
	if r.Stdout != "not loaded\n" {
		t.Errorf("a job preloading a library into the init printed %q, want %q; stderr %q", r.Stdout, "not loaded\n", r.Stderr)
	}
}

// TestDataProfile: the python3-data profile of an image with numpy, pandas and matplotlib draws
// a plot that is read back from the held container.
func TestDataProfile(t *testing.T) {
	p, profiles := newProvider(t)
	providertest.RunDataProfile(t, providertest.Env{Provider: p, Profiles: profiles})
}

// TestResolveLeavesOutProfilesLackingFiles: a profile whose image lacks a file it requires is not
// offered.
func TestResolveLeavesOutProfilesLackingFiles(t *testing.T) {
	p, _ := newProvider(t)
	base := profile.Builtin("", testenv.Image())
	lacking := base["python3"]
	lacking.Name, lacking.Requires = "python3-lacking", []string{"/usr/lib/python3/dist-packages/no-such-package/__init__.py"}
	having := base["python3"]
	having.Name, having.Requires = "python3-having", []string{"/usr/bin/python3"}
	got, err := p.Resolve(t.Context(), profile.Set{lacking.Name: lacking, having.Name: having})
	if err != nil {
		t.Fatal(err)
	}
	if got.Has(lacking.Name) || !got.Has(having.Name) {
		t.Errorf("Resolve() offers %v, want python3-having only", got.Names())
	}
}

// BenchmarkSteps: each step of a container sandbox's life, one at a time.
// go test -run '^$' -bench Steps -benchtime 20x ./internal/providers/docker/
func BenchmarkSteps(b *testing.B) {
	p, profiles := newProvider(b)
	e := providertest.Env{Provider: p, Profiles: profiles}
	b.Run("python3", func(b *testing.B) { providertest.BenchSteps(b, e, "python3", "pass") })
	b.Run("nodejs", func(b *testing.B) { providertest.BenchSteps(b, e, "nodejs", "0") })
}

// BenchmarkInit: a container's steps with each init a worker may run, one after the other: the
// worker's own static executable (a worker built by `go install`) and the small sandbox init that
// `make build` embeds.
// go test -run '^$' -bench Init -benchtime 30x ./internal/providers/docker/
func BenchmarkInit(b *testing.B) {
	worker, err := testenv.BuildProgram(b.TempDir(), "cmd/worker")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, bin string }{{"worker", worker}, {"sandboxinit", staticInit(b)}} {
		b.Run(c.name, func(b *testing.B) {
			p, profiles := newProviderWith(b, docker.Options{Fleet: fleet, Worker: "providertest", InitBinary: c.bin})
			providertest.BenchSteps(b, providertest.Env{Provider: p, Profiles: profiles}, "python3", "pass")
		})
	}
}

// TestMachineryOutOfStderr: a container init that fails while the program runs (here: on a
// stdin frame it does not know, which it reports on its own stderr; a program that used up the
// pids limit can make the Go runtime's crash report land there too) writes nothing into the
// job's stderr. The init ignores signals such as SIGQUIT, so a frame is what breaks it.
func TestMachineryOutOfStderr(t *testing.T) {
	p, profiles := newProvider(t)
	providertest.RunMachineryOutOfStderr(t, providertest.Env{Provider: p, Profiles: profiles}, func(t *testing.T, sb sandbox.Sandbox) {
		if err := docker.BreakInit(sb); err != nil {
			t.Fatalf("BreakInit() error = %v", err)
		}
	})
}
