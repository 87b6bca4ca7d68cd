// Package testenv starts the real services tests run against — a redis-server child process on a
// free loopback port and an embedded JetStream server in a temporary directory — and decides what
// a missing part means: outside CI the test is skipped with what is missing; with CI=true it fails.
package testenv

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI, where nothing may be skipped for want of a service.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t outside CI and fails it in CI, saying what is missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("missing in CI: %s", msg)
	}
	t.Skipf("missing: %s (set up with `make test`)", msg)
}

// NeedRoot requires root, which the namespace provider needs for cgroups and uid switching.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (the namespace provider makes cgroups and switches uids)")
	}
}

// RootFS is the Debian root file system sandboxes run in when RUNFLEET_TEST_ROOTFS names one (as
// `make test` does), or "" for the host's /usr.
func RootFS(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RUNFLEET_TEST_ROOTFS")
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(dir + "/usr/bin/python3"); err != nil {
		Missing(t, "root fs %s with python3: %v", dir, err)
	}
	return dir
}

// Image is the sandbox image Docker and gVisor tests run: RUNFLEET_TEST_IMAGE, or the one
// `make image` builds.
func Image() string {
	return cmp.Or(os.Getenv("RUNFLEET_TEST_IMAGE"), "runfleet-sandbox:latest")
}

// WaitFor polls cond until it holds, and fails the test when within passes first: tests wait for
// an event (a page stored, a process gone), bounded generously for a loaded machine. It returns
// how long the wait took.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// Buffer is a buffer that a process writes to while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// BuildProgram builds the module's package pkg (say "cmd/worker") into dir with build tags, for
// tests that run the real program, and returns the binary's path. It is meant for TestMain. The
// binary is static (CGO_ENABLED=0), as a release is: a worker built without the embedded sandbox
// init runs its own executable as its containers' init, and the Docker provider refuses a
// dynamic one.
func BuildProgram(dir, pkg string, tags ...string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	build := exec.Command("go", append(args, "github.com/runfleet/runfleet/fleet/"+pkg)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	return bin, nil
}

// envDockerInit hands a test process's static worker to the child processes it starts.
const envDockerInit = "RUNFLEET_TEST_DOCKER_INIT"

// DockerInit is the small sandbox init (internal/cmd/sandboxinit), the one a built worker
// embeds, for the Docker provider's Options.InitBinary: a test binary is dynamically linked when
// cgo is on (always with -race), and the provider refuses such an init. It is built once per test process, into a directory of this source tree's (so that
// test processes of one tree share it and never take another tree's), and handed to child
// processes through the environment.
var DockerInit = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv(envDockerInit); bin != "" {
		return bin, nil
	}
	work, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("runfleet-test-init-%x", sha256.Sum256(bytes.TrimSpace(work)))[:len("runfleet-test-init-")+16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built, err := BuildProgram(tmp, "internal/cmd/sandboxinit")
	if err != nil {
		return "", err
	}
	// Renamed whole into place: test processes that build at once each see a complete binary.
	bin := filepath.Join(dir, "sandboxinit")
	if err := os.Rename(built, bin); err != nil {
		return "", err
	}
	os.Setenv(envDockerInit, bin)
	return bin, nil
})
