//go:build deploy

package deploy_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// The images `make images` builds; `make deploy-test` builds them before it runs these tests.
var images = []string{"runfleet-worker:latest", "runfleet-nats:latest", "runfleet-redis:latest"}

// needDocker requires a Docker daemon and the images.
func needDocker(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		testenv.Missing(t, "a Docker daemon: %v: %s", err, out)
	}
	for _, img := range images {
		if out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", img).CombinedOutput(); err != nil {
			testenv.Missing(t, "image %s (make images): %s", img, strings.TrimSpace(string(out)))
		}
	}
}

// docker runs the docker CLI and returns its output, failing t on an error.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerTry(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// dockerTry runs the docker CLI and returns its output and error.
func dockerTry(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// connect connects to NATS at url, which may not accept connections yet, and returns a client of
// the default fleet once its jobs stream, which the workers make, answers.
func connect(t *testing.T, url string) (*nats.Conn, *runfleet.Client) {
	t.Helper()
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := runfleet.NewClient(t.Context(), nc, runfleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := js.Stream(ctx, c.Subjects().JobsStream())
		cancel()
		if err == nil {
			return nc, c
		}
		if time.Now().After(deadline) {
			t.Fatalf("NATS at %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// heartbeat is what a worker answers a ping with.
type heartbeat struct {
	ID, Provider string
	Slots        int
}

// waitWorkers pings the fleet until n workers answer, and returns their answers.
func waitWorkers(t *testing.T, nc *nats.Conn, n int, within time.Duration) map[string]heartbeat {
	t.Helper()
	s, _ := job.NewSubjects("")
	seen := map[string]heartbeat{}
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	deadline := time.Now().Add(within)
	for len(seen) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers answered within %v: %v", len(seen), n, within, seen)
		}
		if err := nc.PublishRequest(s.Workers()+".ping", inbox, nil); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := sub.NextMsg(500 * time.Millisecond)
			if err != nil {
				break
			}
			var hb heartbeat
			if json.Unmarshal(m.Data, &hb) == nil && hb.ID != "" {
				seen[hb.ID] = hb
			}
		}
	}
	return seen
}

// outcome is a settled job and what it printed.
type outcome struct {
	st     job.Settlement
	stdout string
}

// runJobs submits reqs and waits for each settlement.
func runJobs(t *testing.T, c *runfleet.Client, reqs []job.Request, within time.Duration) map[string]outcome {
	t.Helper()
	for _, req := range reqs {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := c.Submit(ctx, "", req, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]outcome{}
	for _, req := range reqs {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(t.Context(), within)
		st, err := c.Watch(ctx, req.ID, func(p runfleet.Page) error {
			if p.Stream == job.Stdout {
				out.Write(p.Data)
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("job %s: %v", req.ID, err)
		}
		got[req.ID] = outcome{st, out.String()}
	}
	return got
}

// settlementsStored counts the settlement messages stored per job.
func settlementsStored(t *testing.T, nc *nats.Conn) map[string]int {
	t.Helper()
	s, err := jsOf(t, nc).Stream(t.Context(), "RUNFLEET_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("runfleet.results.*.*.settled"))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for subj, k := range info.State.Subjects {
		n[strings.Split(subj, ".")[3]] = int(k)
	}
	return n
}

// mixedJobs are n jobs, python3 and nodejs by turns, each printing its own number squared.
func mixedJobs(n int) ([]job.Request, map[string]string) {
	reqs := make([]job.Request, n)
	want := map[string]string{}
	for i := range reqs {
		id := "deploy-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(i)
		if i%2 == 0 {
			reqs[i] = job.Request{ID: id, Language: "python3", Code: "print(" + strconv.Itoa(i) + "**2)"}
		} else {
			reqs[i] = job.Request{ID: id, Language: "nodejs", Code: "console.log(" + strconv.Itoa(i) + "**2)"}
		}
		want[id] = strconv.Itoa(i*i) + "\n"
	}
	return reqs, want
}
