//go:build deploy

package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// TestComposeUp brings deploy/compose.yaml up for real with three workers, runs 30 python3 and
// nodejs jobs submitted from the host, and takes it down: every job settles once with its output,
// the work is shared, and down leaves no container, and no volume when asked.
func TestComposeUp(t *testing.T) {
	needDocker(t)
	out, err := exec.Command("docker", "compose", "version", "--short").CombinedOutput()
	major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".")
	if n, _ := strconv.Atoi(major); err != nil || n < 2 {
		testenv.Missing(t, "the docker compose v2+ CLI plugin (scripts/setup deploy): %v %s", err, out)
	}
	project := fmt.Sprintf("rfdeploytest%d", os.Getpid())
	port, gwPort, metricsPort := testenv.FreePortNumber(), testenv.FreePortNumber(), testenv.FreePortNumber()
	const key = "compose-test-key"
	compose := func(args ...string) (string, error) {
		cmd := exec.Command("docker", append([]string{"compose", "-p", project, "-f", "compose.yaml"}, args...)...)
		cmd.Env = append(os.Environ(), "RUNFLEET_NATS_PORT="+strconv.Itoa(port), "RUNFLEET_API_KEY="+key,
			"RUNFLEET_GATEWAY_PORT="+strconv.Itoa(gwPort), "RUNFLEET_METRICS_PORT="+strconv.Itoa(metricsPort))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := compose("logs", "--no-color", "--tail", "50")
			t.Logf("compose logs:\n%s", logs)
		}
		_, _ = compose("down", "-v", "--remove-orphans", "-t", "5")
	})
	start := time.Now()
	if out, err := compose("up", "-d", "--scale", "worker=3", "--no-build", "--pull", "never"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	nc, client := connect(t, fmt.Sprintf("nats://127.0.0.1:%d", port))
	fleet := waitWorkers(t, nc, 3, 2*time.Minute)
	up := time.Since(start)
	for id, hb := range fleet {
		if hb.Provider != "namespace" {
			t.Errorf("worker %s runs provider %q, want namespace", id, hb.Provider)
		}
	}

	reqs, want := mixedJobs(30)
	start = time.Now()
	got := runJobs(t, client, reqs, 3*time.Minute)
	took := time.Since(start)
	stored := settlementsStored(t, nc)
	perWorker := map[string]int{}
	for _, req := range reqs {
		o := got[req.ID]
		if o.st.Status != job.StatusSucceeded || o.stdout != want[req.ID] {
			t.Errorf("%s job %s: %s %s, stdout %q, want succeeded and %q", req.Language, req.ID, o.st.Status, o.st.Reason, o.stdout, want[req.ID])
		}
		if stored[req.ID] != 1 {
			t.Errorf("job %s has %d settlements stored, want 1", req.ID, stored[req.ID])
		}
		perWorker[o.st.Worker]++
	}
	if len(perWorker) < 2 {
		t.Errorf("jobs per worker %v: want at least two workers to take some", perWorker)
	}
	checkGateway(t, fmt.Sprintf("http://127.0.0.1:%d", gwPort), fmt.Sprintf("http://127.0.0.1:%d", metricsPort), key)
	if out, _ := compose("exec", "-T", "redis", "redis-cli", "config", "get", "appendonly"); !strings.Contains(out, "yes") {
		t.Errorf("redis appendonly: %q, want yes", out)
	}
	t.Logf("compose up to 3 workers answering: %v; 30 jobs submitted and settled in %v; jobs per worker %v",
		up.Round(time.Millisecond), took.Round(time.Millisecond), perWorker)

	label := "label=com.docker.compose.project=" + project
	start = time.Now()
	if out, err := compose("down", "-t", "30"); err != nil {
		t.Fatalf("compose down: %v\n%s", err, out)
	}
	t.Logf("compose down: %v", time.Since(start).Round(time.Millisecond))
	if left := docker(t, "ps", "-aq", "--filter", label); left != "" {
		t.Errorf("containers left by compose down: %s", left)
	}
	if vols := strings.Fields(docker(t, "volume", "ls", "-q", "--filter", label)); len(vols) != 2 {
		t.Errorf("volumes after compose down: %v, want the NATS and Redis data kept", vols)
	}
	if out, err := compose("down", "-v"); err != nil {
		t.Fatalf("compose down -v: %v\n%s", err, out)
	}
	if vols := docker(t, "volume", "ls", "-q", "--filter", label); vols != "" {
		t.Errorf("volumes left by compose down -v: %s", vols)
	}
}

// checkGateway runs a job through compose's gateway, as Dify would, and reads its metrics without
// the key.
func checkGateway(t *testing.T, base, metrics, key string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	var body []byte
	var code int
	testenv.WaitFor(t, time.Minute, "the gateway to answer", func() bool {
		req, _ := http.NewRequest("POST", base+"/v1/sandbox/run", strings.NewReader(`{"language":"python3","code":"print(6*7)","preload":"","enable_network":true}`))
		req.Header.Set("X-Api-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		code = resp.StatusCode
		return true
	})
	var ran struct {
		Code int `json:"code"`
		Data struct {
			Stdout string `json:"stdout"`
			Error  string `json:"error"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ran); code != http.StatusOK || err != nil || ran.Code != 0 || ran.Data.Stdout != "42\n" {
		t.Errorf("POST /v1/sandbox/run through compose's gateway = %d %s, want 200 with stdout 42", code, body)
	}
	resp, err := client.Get(metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "runfleet_") {
		t.Errorf("GET /metrics without the key = %d, want 200 with runfleet_ metrics", resp.StatusCode)
	}
}
