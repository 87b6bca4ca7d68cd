package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/internal/release"
	"github.com/runfleet/runfleet/internal/testenv"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// needTools requires the go command and git, which lists the files a module's zip holds.
func needTools(t *testing.T) {
	t.Helper()
	for _, prog := range []string{"go", "git"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Missing(t, "%s: %v", prog, err)
		}
	}
}

// goCmd runs the go command in dir with env and returns its combined output, failing t on error.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return string(out)
}

// TestInstall installs the modules as a user outside the repository would, from a module proxy
// built from the working tree at the version the go.mod files name: the worker with `go install`,
// the client with `go get` into an empty module and a program that imports it.
func TestInstall(t *testing.T) {
	needTools(t)
	root := repoRoot(t)
	version, err := release.Version(root)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := release.WriteProxy(root, proxy, version); err != nil {
		t.Fatal(err)
	}
	env, err := release.GoEnv(t.Context(), proxy, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	env = append(env, "GOBIN="+bin)
	service := t.TempDir()

	goCmd(t, service, env, "mod", "init", "example.com/service")
	goCmd(t, service, env, "install", release.Root+"/cmd/worker@"+version)
	out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "worker"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("worker --version: %v\n%s", err, out)
	}

	goCmd(t, service, env, "get", release.Root+"@"+version)
	const program = `package main

import (
	"fmt"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

func main() {
	_ = runfleet.NewClient
	fmt.Println(job.Request{Language: "python3", Code: "print(6*7)"}.Language)
}
`
	if err := os.WriteFile(filepath.Join(service, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := goCmd(t, service, env, "run", "."); got != "python3\n" {
		t.Errorf("go run . = %q, want %q", got, "python3\n")
	}
	// The client alone: a service's build list holds none of the fleet's modules.
	all := goCmd(t, service, env, "list", "-m", "all")
	t.Logf("a service that imports the client builds with %d modules", strings.Count(all, "\n"))
	for _, fleet := range []string{release.Root + "/internal", release.Root + "/cmd", "nats-server", "redis"} {
		if strings.Contains(all, fleet) {
			t.Errorf("go list -m all in a service holds %s:\n%s", fleet, all)
		}
	}
}
