package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/release"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// repoRoot is the repository's root, three levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
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
	goCmd(t, service, env, "install", release.Root+"/fleet/cmd/worker@"+version)
	out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "worker"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("worker --version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "worker "+version+" ") {
		t.Errorf("worker --version = %q, want the module's version %s", out, version)
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
	for _, fleet := range []string{release.Root + "/fleet", "nats-server", "redis"} {
		if strings.Contains(all, fleet) {
			t.Errorf("go list -m all in a service holds %s:\n%s", fleet, all)
		}
	}
}

// TestSetVersion releases a copy of the tree at another version, then checks each nested module's
// go.sum as the go command does outside the workspace: it downloads the siblings the module
// requires from a module proxy of the copy and compares their hashes.
func TestSetVersion(t *testing.T) {
	needTools(t)
	src, dir := repoRoot(t), t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), "git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	for f := range strings.SplitSeq(git(src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"), "\x00") {
		data, err := os.ReadFile(filepath.Join(src, f))
		if f == "" || os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(dir, "init", "-q")
	git(dir, "add", "-A")

	const version = "v0.99.0"
	if err := release.SetVersion(dir, version); err != nil {
		t.Fatal(err)
	}
	if got, err := release.Version(dir); got != version || err != nil {
		t.Fatalf("Version() = %q, %v after SetVersion(%q)", got, err, version)
	}
	proxy := t.TempDir()
	if err := release.WriteProxy(dir, proxy, version); err != nil {
		t.Fatal(err)
	}
	env, err := release.GoEnv(t.Context(), proxy, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, "GOFLAGS=-mod=readonly -modcacherw")
	for _, m := range release.Modules[1:] {
		mod, err := os.ReadFile(filepath.Join(dir, m.Dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(mod), "replace") {
			t.Errorf("%s/go.mod has a replace directive:\n%s", m.Dir, mod)
		}
		var siblings []string
		for _, s := range release.Modules {
			if strings.Contains(string(mod), "\t"+s.Path+" "+version+"\n") {
				siblings = append(siblings, s.Path)
			}
		}
		if len(siblings) == 0 {
			t.Fatalf("%s/go.mod requires no sibling at %s:\n%s", m.Dir, version, mod)
		}
		goCmd(t, filepath.Join(dir, m.Dir), env, append([]string{"mod", "download"}, siblings...)...)
	}
}
