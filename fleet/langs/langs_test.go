package langs_test

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestMain(m *testing.M) {
	namespace.Init()
	containerinit.Init()
	bootstrap.Main()
	goleak.VerifyTestMain(m)
}

// everyLanguage says whether the langs root fs and image were built (`make langs-test` sets
// RUNFLEET_TEST_LANGS=1): then every manifest must run on both providers. Otherwise the
// manifests whose toolchain the suite's root fs holds run on it (bash, and C and C++ where gcc
// is), and bash on the suite's image.
func everyLanguage() bool { return os.Getenv("RUNFLEET_TEST_LANGS") == "1" }

// langsRoot is the root file system the manifests run on.
func langsRoot(t testing.TB) string {
	t.Helper()
	if !everyLanguage() {
		return testenv.RootFS(t)
	}
	root := cmp.Or(os.Getenv("RUNFLEET_TEST_LANGS_ROOTFS"), "../../var/rootfs-langs")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/rustc")); err != nil {
		testenv.Missing(t, "the langs root fs %s (make langs): %v", root, err)
	}
	return root
}

func TestManifests(t *testing.T) {
	s, _, err := profile.LoadDir(".", profile.Set{}, "", "runfleet-langs:latest")
	if err != nil {
		t.Fatal(err)
	}
	// piston's language names and judge0 CE's ids (issue 40) are aliases.
	for _, name := range []string{"bash", "c", "c++", "go", "java", "rust", "46", "50", "54", "60", "62", "73"} {
		if !s.Has(name) {
			t.Errorf("no manifest answers to %q; have %v", name, s.Names())
		}
	}
	for _, n := range s.Names() {
		p := s[n]
		if p.Test == nil || p.Test.Stdout == "" || p.Version == "" {
			t.Errorf("%s: test %+v, version %q: want a test program with its output, and a version", n, p.Test, p.Version)
		}
	}
}

func TestLanguagesNamespace(t *testing.T) {
	testenv.NeedRoot(t)
	root := langsRoot(t)
	s, skipped, err := profile.LoadDir(".", profile.Set{}, root, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) > 0 {
		if everyLanguage() {
			t.Errorf("the langs root fs %s lacks the toolchains of %v", root, skipped)
		}
		t.Logf("root fs %q lacks the toolchains of %v (make langs builds one with all)", root, skipped)
	}
	p := namespaceProvider(t)
	for _, name := range s.Names() {
		t.Run(name, func(t *testing.T) { runTest(t, p, s[name]) })
	}
	if c, ok := s["c"]; ok {
		t.Run("c compile error", func(t *testing.T) { compileError(t, p, c) })
	}
}

func TestLanguagesDocker(t *testing.T) {
	img := testenv.Image()
	if everyLanguage() {
		img = cmp.Or(os.Getenv("RUNFLEET_TEST_LANGS_IMAGE"), "runfleet-langs:latest")
	}
	initBin, err := testenv.DockerInit()
	if err != nil {
		t.Fatal(err)
	}
	p, err := docker.New(t.Context(), docker.Options{Fleet: "runfleet-test-langs", Worker: "langs-test", InitBinary: initBin})
	if err != nil {
		testenv.Missing(t, "docker daemon: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	s, _, err := profile.LoadDir(".", profile.Set{}, "", img)
	if err != nil {
		t.Fatal(err)
	}
	if !everyLanguage() {
		s = profile.Set{"bash": s["bash"]}
	}
	resolved, err := p.Resolve(t.Context(), s)
	if err != nil {
		testenv.Missing(t, "image %s (make langs, or make image): %v", img, err)
	}
	resolved = profile.SealDigest(resolved)
	if len(resolved) != len(s) {
		t.Errorf("image %s serves %v of %v", img, resolved.Names(), s.Names())
	}
	for _, name := range resolved.Names() {
		t.Run(name, func(t *testing.T) { runTest(t, p, resolved[name]) })
	}
	if c, ok := resolved["c"]; ok {
		t.Run("c compile error", func(t *testing.T) { compileError(t, p, c) })
	}
}

// TestAddLanguage: an operator adds a language with a manifest alone, no worker built again. The
// manifest is ruby's where the root fs has Debian's ruby; where it has not (the suite's root fs),
// it is the same manifest on perl, which runs the same test program (`print "OK\n"` is both).
func TestAddLanguage(t *testing.T) {
	testenv.NeedRoot(t)
	root := langsRoot(t)
	interp := "/usr/bin/ruby"
	if _, err := os.Stat(filepath.Join(root, interp)); err != nil {
		interp = "/usr/bin/perl"
	}
	t.Logf("ruby's manifest runs %s", interp)
	dir := t.TempDir()
	manifest := `{"name": "ruby", "version": "3.1", "aliases": ["rb", "72"], "source": "main.rb",
		"run": ["` + interp + `", "main.rb"], "requires": ["` + interp + `"],
		"test": {"code": "print \"OK\\n\"\n", "stdout": "OK\n"}}`
	if err := os.WriteFile(filepath.Join(dir, "ruby.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	s, skipped, err := profile.LoadDir(dir, profile.Builtin(root, ""), root, "")
	if err != nil || len(skipped) > 0 {
		t.Fatalf("LoadDir() = %v skipped, error %v", skipped, err)
	}
	rb, ok := s.Lookup("rb")
	if !ok || rb.Name != "ruby" || !s.Has("python3") {
		t.Fatalf("profiles %v: want ruby under its alias rb, and the built-ins kept", s.Names())
	}
	runTest(t, namespaceProvider(t), rb)
}

func namespaceProvider(t testing.TB) *namespace.Provider {
	t.Helper()
	dir := t.TempDir()
	bin, err := testenv.BuildProgram(dir, "internal/cmd/sandboxinit")
	if err != nil {
		t.Fatal(err)
	}
	// The small static supervisor, as a built worker embeds: the bootstrap is that binary again,
	// and a test binary built with -race links the host's C library, which a root fs may lack.
	sup, err := supervise.PrivateCopyFile(bin, filepath.Join(dir, "private"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test-langs", StateDir: t.TempDir(), UIDBase: 410000,
		UIDLockDir: filepath.Join(os.TempDir(), "runfleet-test-uids"), Supervisor: sup})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	return p
}

// run runs code with stdin in a sandbox of prof under the default job limits, and returns its
// stdout with the bootstrap's status line taken off, whether it said the code compiled, and its stderr.
func run(t *testing.T, p sandbox.Provider, prof sandbox.Profile, code, stdin string) (stdout string, compiled bool, stderr string, exit sandbox.Exit) {
	t.Helper()
	d := job.DefaultPolicy().Default
	limits := sandbox.Limits{Timeout: d.Timeout + prof.CompileTimeout, MemoryBytes: d.MemoryBytes, Pids: d.Pids, CPUs: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, sandbox.Shape{Profile: prof, WorkspaceBytes: 64 << 20, TmpBytes: 256 << 20, Limits: limits})
	if err != nil {
		t.Fatalf("Create() error = %v", err)
	}
	defer func() {
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("Destroy() error = %v", err)
		}
	}()
	if err := sb.Assign(ctx, sandbox.Job{ID: "langs-" + prof.Name, Attempt: 1, Worker: "langs-test", Limits: limits}); err != nil {
		t.Fatalf("Assign() error = %v", err)
	}
	payload, err := profile.Payload(job.Request{Code: code, Stdin: stdin})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	start := time.Now()
	exit, err = sb.Run(ctx, bytes.NewReader(payload), &out, &errb)
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	t.Logf("%s: ran in %s (wall %s)", prof.Name, time.Since(start).Round(time.Millisecond), exit.Usage.Wall.Round(time.Millisecond))
	stdout, compiled = out.String(), true
	if prof.CompileTimeout > 0 {
		switch {
		case strings.HasPrefix(stdout, bootstrap.StatusRun):
			stdout = strings.TrimPrefix(stdout, bootstrap.StatusRun)
		case strings.HasPrefix(stdout, bootstrap.StatusCompileError):
			stdout, compiled = strings.TrimPrefix(stdout, bootstrap.StatusCompileError), false
		default:
			t.Errorf("stdout %q begins with no status line", stdout)
		}
	}
	return stdout, compiled, errb.String(), exit
}

func runTest(t *testing.T, p sandbox.Provider, prof sandbox.Profile) {
	t.Helper()
	out, compiled, stderr, exit := run(t, p, prof, prof.Test.Code, prof.Test.Stdin)
	if !compiled || exit.Code != 0 || out != prof.Test.Stdout {
		t.Errorf("%s test program: compiled %v, exit %+v, stdout %q, stderr %q; want stdout %q", prof.Name, compiled, exit, out, stderr, prof.Test.Stdout)
	}
}

func compileError(t *testing.T, p sandbox.Provider, prof sandbox.Profile) {
	out, compiled, stderr, exit := run(t, p, prof, "int main(void) { return undeclared; }\n", "")
	if compiled || exit.Code == 0 || out != "" || !strings.Contains(stderr, "undeclared") {
		t.Errorf("compile error: compiled %v, exit %+v, stdout %q, stderr %q; want the compiler's message on stderr", compiled, exit, out, stderr)
	}
}
