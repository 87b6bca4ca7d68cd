package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/job"
)

// TestOperationsListsEveryFlag keeps the configuration table of docs/operations.md in step with
// the flags.
func TestOperationsListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := flags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"` |") {
			t.Errorf("docs/operations.md's configuration table lacks --%s", f.Name)
		}
	})
}

func TestFlagsReadEnvironment(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "default", want: "redis://127.0.0.1:6379/0"},
		{name: "env", env: map[string]string{"RUNFLEET_REDIS_URL": "redis://env:1/0"}, want: "redis://env:1/0"},
		{name: "flag wins", args: []string{"--redis-url", "redis://flag:1/0"},
			env: map[string]string{"RUNFLEET_REDIS_URL": "redis://env:1/0"}, want: "redis://flag:1/0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, cfg := flags(io.Discard)
			if err := cli.Parse(fs, c.args, func(k string) string { return c.env[k] }); err != nil {
				t.Fatal(err)
			}
			if cfg.redisURL != c.want {
				t.Errorf("redis url = %q, want %q", cfg.redisURL, c.want)
			}
		})
	}
}

// TestBadFlagsFailBeforeConnecting: a wrong flag is reported as itself, before any connection is
// tried (the addresses here would fail if dialled).
func TestBadFlagsFailBeforeConnecting(t *testing.T) {
	base := []string{"--nats-url", "nats://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"provider", []string{"--provider", "bogus"}, "--provider"},
		{"concurrency", []string{"--concurrency", "0"}, "--concurrency"},
		{"queue", []string{"--queues", "Not A Queue"}, "--queues"},
		{"prefix", []string{"--prefix", "a.b"}, "--prefix"},
		{"redis url", []string{"--redis-url", "http://x"}, "--redis-url"},
		{"sentinel url without master", []string{"--redis-url", "redis+sentinel://127.0.0.1:1"}, "--redis-url"},
		{"cluster url with a database", []string{"--redis-url", "redis+cluster://127.0.0.1:1,127.0.0.1:2/0"}, "--redis-url"},
		{"lease", []string{"--lease-ttl", "10ms"}, "--lease-ttl"},
		{"max timeout below the default timeout", []string{"--max-timeout", "5s"}, "--max-timeout"},
		{"max pages", []string{"--max-pages", "-1"}, "--max-pages"},
		{"retention below the duplicate window", []string{"--retention", "1m"}, "--retention"},
		{"jobs max bytes", []string{"--jobs-max-bytes", "0"}, "--jobs-max-bytes"},
		{"creds file missing", []string{"--nats-creds", "/nonexistent/user.creds"}, "--nats-creds"},
		{"nkey file missing", []string{"--nats-nkey", "/nonexistent/user.nk"}, "--nats-nkey"},
		{"CA file missing", []string{"--nats-tls-ca", "/nonexistent/ca.pem"}, "--nats-tls-ca"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := run(t.Context(), t.Context(), append(append([]string{}, base...), c.args...), func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "unreachable") {
				t.Errorf("run(%v) error = %v, want one about %s", c.args, err, c.want)
			}
		})
	}
}

// TestMaxPagesFollowMaxTimeout: a chatty job as long as --max-timeout allows, which sets no
// max_pages, gets the pages the page policy needs for its whole timeout; --max-pages sets them.
func TestMaxPagesFollowMaxTimeout(t *testing.T) {
	body := []byte(`{"language":"python3","code":"print(1)","limits":{"timeout_ms":1800000}}`)
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want int64
	}{
		{name: "derived from --max-timeout", args: []string{"--max-timeout", "30m"},
			want: job.PagesNeeded(30*time.Minute, job.DefaultPolicy().Default.OutputBytes, job.DefaultPolicy().Default.PageBytes)},
		{name: "--max-pages", args: []string{"--max-timeout", "30m", "--max-pages", "5000"}, want: 5000},
		{name: "RUNFLEET_MAX_PAGES", args: []string{"--max-timeout", "30m"}, env: map[string]string{"RUNFLEET_MAX_PAGES": "7000"}, want: 7000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, cfg := flags(io.Discard)
			if err := cli.Parse(fs, c.args, func(k string) string { return c.env[k] }); err != nil {
				t.Fatal(err)
			}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			_, b, err := job.Decode(body, "long-chatty", cfg.worker(io.Discard).Policy())
			if err != nil {
				t.Fatal(err)
			}
			if b.MaxPages < c.want {
				t.Errorf("max_pages of a 30-minute job = %d, want at least %d", b.MaxPages, c.want)
			}
		})
	}
}

// TestZeroFlagsKeepTheirMeaning: a flag whose zero means something (no pool, no quota, no grace)
// makes a negative Config field, since the Config's zero is the default.
func TestZeroFlagsKeepTheirMeaning(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		warm  int
		cpus  float64
		grace time.Duration
	}{
		{name: "defaults", warm: 0, cpus: 1, grace: 30 * time.Second},
		{name: "zeros", args: []string{"--warm", "0", "--cpus", "0", "--grace", "0s"}, warm: -1, cpus: -1, grace: -1},
		{name: "values", args: []string{"--warm", "3", "--cpus", "0.5", "--grace", "5s"}, warm: 3, cpus: 0.5, grace: 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, cfg := flags(io.Discard)
			if err := cli.Parse(fs, c.args, func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			w := cfg.worker(io.Discard)
			if w.Warm != c.warm || w.CPUs != c.cpus || w.Grace != c.grace {
				t.Errorf("Config warm %d, cpus %v, grace %v; want %d, %v, %v", w.Warm, w.CPUs, w.Grace, c.warm, c.cpus, c.grace)
			}
		})
	}
}

// TestHeartbeatVersionIsTheProgramsVersion: the heartbeat and the start-up line say what
// --version says (cli.Version), not a variable only make build sets.
func TestHeartbeatVersionIsTheProgramsVersion(t *testing.T) {
	fs, cfg := flags(io.Discard)
	if err := cli.Parse(fs, nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.worker(io.Discard).Version, cli.Version(); got != want {
		t.Errorf("Config.Version = %q, want cli.Version() %q", got, want)
	}
}

// TestHelpOnStdout: worker --help prints its usage and flags, spelled --name, on stdout.
func TestHelpOnStdout(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(t.Context(), t.Context(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr)
	out := stdout.String()
	if !errors.Is(err, flag.ErrHelp) || stderr.Len() != 0 || !strings.HasPrefix(out, "usage: worker") ||
		!strings.Contains(out, "\n  --redis-url string\n") || strings.Contains(out, "\n  -redis-url") {
		t.Errorf("worker --help = %v, stdout %q, stderr %q; want the usage and --flags on stdout", err, out, stderr.String())
	}
}

// TestDevFindsTheLangsRootFS: `worker --dev` run where `make langs` built its root fs takes it as
// --rootfs, so that it serves every shipped language with no flag; a given --rootfs, another
// provider or a worker without --dev keep theirs.
func TestDevFindsTheLangsRootFS(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	parse := func(args ...string) string {
		t.Helper()
		fs, cfg := flags(io.Discard)
		if err := cli.Parse(fs, args, func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
		return cfg.worker(io.Discard).RootFS
	}
	if got := parse("--dev"); got != "" {
		t.Errorf("--dev without var/rootfs-langs: rootfs %q, want the host's", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, devLangsRoot, profile.ShippedDir), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{args: []string{"--dev"}, want: filepath.Join(dir, devLangsRoot)},
		{args: []string{"--dev", "--rootfs", "/srv/root"}, want: "/srv/root"},
		{args: []string{"--dev", "--provider", "docker"}, want: ""},
		{args: nil, want: ""},
	}
	for _, c := range cases {
		if got := parse(c.args...); got != c.want {
			t.Errorf("%v: rootfs %q, want %q", c.args, got, c.want)
		}
	}
}
