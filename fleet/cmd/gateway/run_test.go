package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestRefusesToStart(t *testing.T) {
	n := testenv.StartNATS(t)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no key", []string{"--nats-url", n.URL}, nil, "API key is required"},
		{"empty key in env", []string{"--nats-url", n.URL}, map[string]string{"RUNFLEET_API_KEY": ""}, "API key is required"},
		{"NATS unreachable", []string{"--nats-url", "nats://127.0.0.1:1", "--api-key", "k"}, nil, "unreachable"},
		{"bad prefix", []string{"--nats-url", n.URL, "--api-key", "k", "--prefix", "A.B"}, nil, "prefix"},
		{"bad queue", []string{"--nats-url", n.URL, "--queue", "A.B"}, map[string]string{"RUNFLEET_API_KEY": "k"}, "queue"},
		{"listen address invalid", []string{"--nats-url", n.URL, "--api-key", "k", "--listen", "256.0.0.1:1"}, nil, "--listen"},
		{"replicas a single server cannot keep", []string{"--nats-url", n.URL, "--api-key", "k", "--prefix", "gwrepl", "--stream-replicas", "3"}, nil, "GWREPL_JOBS"},
		{"dependencies missing", []string{"--api-key", "k", "--dependencies", "/nonexistent"}, nil, "--dependencies"},
		{"creds file missing", []string{"--nats-url", "nats://127.0.0.1:1", "--api-key", "k", "--nats-creds", "/nonexistent"}, nil, "--nats-creds"},
		{"CA file not PEM", []string{"--nats-url", "nats://127.0.0.1:1", "--api-key", "k", "--nats-tls-ca", "/dev/null"}, nil, "no PEM certificate"},
		{"max-waiting zero", []string{"--api-key", "k", "--max-waiting", "0"}, nil, "--max-waiting"},
		{"max-output zero", []string{"--api-key", "k", "--max-output", "0"}, nil, "--max-output"},
		{"max-output not a size", []string{"--api-key", "k", "--max-output", "4MB"}, nil, "max-output"},
		{"cancel-on-disconnect not a bool", []string{"--api-key", "k", "--cancel-on-disconnect", "maybe"}, nil, "--cancel-on-disconnect"},
		{"credentials not shown", []string{"--api-key", "k", "--nats-url", "nats://user:s3cret@127.0.0.1:1"}, nil, "nats://REDACTED@127.0.0.1:1 unreachable"},
		{"unknown flag", []string{"--bogus"}, nil, "flag provided but not defined"},
		{"trace-url without the trace id", []string{"--api-key", "k", "--nats-url", "nats://127.0.0.1:1", "--trace-url", "http://jaeger:16686/trace/"}, nil, "--trace-url"},
		{"trace-url not http", []string{"--api-key", "k", "--nats-url", "nats://127.0.0.1:1", "--trace-url", "javascript:alert('{trace_id}')"}, nil, "--trace-url"},
		{"trace-url from the environment", []string{"--api-key", "k", "--nats-url", "nats://127.0.0.1:1"},
			map[string]string{"RUNFLEET_TRACE_URL": "/trace/{trace_id}"}, "--trace-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr testenv.Buffer
			err := run(t.Context(), tc.args, env(tc.env), io.Discard, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// started waits for the "gateway started" line and returns the address it listens on.
func started(t *testing.T, stderr *testenv.Buffer, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned %v before it started:\n%s", err, stderr.String())
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gateway started" {
				return line.Listen
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no \"gateway started\" line in 30s:\n%s", stderr.String())
	return ""
}

// TestServesAndShutsDown: flags from the environment, then on the end of ctx (SIGTERM in main) a
// request waiting past the grace period is answered with its job id and run returns nil.
func TestServesAndShutsDown(t *testing.T) {
	n := testenv.StartNATS(t)
	deps := t.TempDir() + "/deps.txt"
	if err := os.WriteFile(deps, []byte("requests==2.28.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--grace", "500ms", "--dependencies", deps}, env(map[string]string{
			"RUNFLEET_NATS_URL": n.URL, "RUNFLEET_API_KEY": "sekret", "RUNFLEET_PREFIX": "gwcmd"}), io.Discard, &stderr)
	}()
	base := "http://" + started(t, &stderr, done)
	client := &http.Client{}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer sekret")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get("/v1/sandbox/dependencies?language=python3"); code != http.StatusOK || !strings.Contains(b, `"requests"`) {
		t.Errorf("dependencies = %d %s, want requests listed", code, b)
	}

	// No worker serves queue default: the request waits until shutdown releases it.
	type answer struct {
		code int
		body string
		err  error
	}
	waited := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", base+"/v1/jobs?wait=true", strings.NewReader(`{"id":"held","language":"python3","code":"print(1)"}`))
		req.Header.Set("X-Api-Key", "sekret")
		resp, err := client.Do(req)
		if err != nil {
			waited <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		waited <- answer{code: resp.StatusCode, body: string(b)}
	}()
	testenv.WaitFor(t, 30*time.Second, "the request waiting (runfleet_gateway_waiting 1)", func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, "runfleet_gateway_waiting 1")
	})
	stop()
	a := <-waited
	if a.err != nil || a.code != http.StatusAccepted || !strings.Contains(a.body, `"job_id":"held"`) {
		t.Errorf("waiting request at shutdown = %d %q %v, want 202 with its job id", a.code, a.body, a.err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return 30s after shutdown began")
	}
	if !strings.Contains(stderr.String(), `"gateway stopped"`) {
		t.Errorf("log has no \"gateway stopped\":\n%s", stderr.String())
	}
}

// TestMetricsListener: with --metrics-listen, /metrics and /v1/backlog answer there without the
// key (and only they), while on --listen they still need it.
func TestMetricsListener(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx, stop := context.WithCancel(t.Context())
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--grace", "100ms"},
			env(map[string]string{"RUNFLEET_NATS_URL": n.URL, "RUNFLEET_API_KEY": "sekret", "RUNFLEET_PREFIX": "gwmetrics"}), io.Discard, &stderr)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run() = %v", err)
		}
	}()
	base := "http://" + started(t, &stderr, done)
	var metricsAddr string
	for line := range strings.SplitSeq(stderr.String(), "\n") {
		var l struct {
			Msg           string
			MetricsListen string `json:"metrics_listen"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "metrics served without the key" {
			metricsAddr = l.MetricsListen
		}
	}
	if metricsAddr == "" {
		t.Fatalf("no metrics listener logged:\n%s", stderr.String())
	}
	client := &http.Client{}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		url  string
		want int
	}{
		{"http://" + metricsAddr + "/metrics", http.StatusOK},
		{"http://" + metricsAddr + "/v1/backlog?queue=default", http.StatusOK},
		{"http://" + metricsAddr + "/v1/jobs/x", http.StatusNotFound},
		{base + "/metrics", http.StatusUnauthorized},
		{base + "/v1/backlog", http.StatusUnauthorized},
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s = %d, want %d", tc.url, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(string(b), "runfleet_") && !strings.Contains(string(b), `"queue":"default"`) {
			t.Errorf("GET %s: no runfleet_ metric in %.200s", tc.url, b)
		}
	}
}

// TestMaxOutputTakesEverySize: --max-output reads the size syntax of every program's size flags.
func TestMaxOutputTakesEverySize(t *testing.T) {
	for in, want := range map[string]int64{"4m": 4 << 20, "4MiB": 4 << 20, "64k": 64 << 10, "1048576": 1 << 20} {
		fs, c := flags(io.Discard)
		if err := cli.Parse(fs, []string{"--max-output", in}, env(nil)); err != nil || int64(c.maxOutput) != want {
			t.Errorf("--max-output %s = %d, %v; want %d", in, int64(c.maxOutput), err, want)
		}
	}
}

// TestHelpOnStdout: gateway --help prints its usage and flags, spelled --name, on stdout.
func TestHelpOnStdout(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(t.Context(), []string{"--help"}, env(nil), &stdout, &stderr)
	out := stdout.String()
	if !errors.Is(err, flag.ErrHelp) || stderr.Len() != 0 || !strings.HasPrefix(out, "usage: gateway") ||
		!strings.Contains(out, "\n  --api-key string\n") || strings.Contains(out, "\n  -api-key") {
		t.Errorf("gateway --help = %v, stdout %q, stderr %q; want the usage and --flags on stdout", err, out, stderr.String())
	}
}

// TestCLIListsEveryFlag keeps the gateway's flag table of docs/cli.md in step with the flags.
func TestCLIListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## gateway\n")
	if !ok {
		t.Fatal("docs/cli.md has no gateway section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	fs, _ := flags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(section, "`--"+f.Name+"`") {
			t.Errorf("docs/cli.md's gateway section lacks --%s", f.Name)
		}
	})
}
