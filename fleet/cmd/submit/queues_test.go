package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/protocol"
)

// TestQueueCommands: queue add declares a queue for some tenants or all, list prints the
// declarations (default among them) and says when there are none, remove ends one; tenant set
// writes the storage bounds; bad input is one line before anything is connected, and
// docs/cli.md gives every command's usage line.
func TestQueueCommands(t *testing.T) {
	n := testenv.StartNATS(t)
	if got := submitAt(n.URL, "queue", "list"); got.code != 0 || got.stdout != "" || !strings.Contains(got.stderr, "no queue is declared") {
		t.Errorf("queue list without declarations = %d %q %q, want nothing and a note", got.code, got.stdout, got.stderr)
	}
	for _, args := range [][]string{
		{"queue", "add", "gpu", "--tenants", "bravo,acme"},
		{"queue", "add", "batch"},
		{"queue", "add", "scratch"},
		{"queue", "remove", "scratch"},
	} {
		if got := submitAt(n.URL, args...); got.code != 0 || strings.Count(got.stdout, "\n") != 1 {
			t.Fatalf("submit %q = %d %q %q, want one line", args, got.code, got.stdout, got.stderr)
		}
	}
	table := submitAt(n.URL, "queue", "list")
	if got := strings.Join(strings.Fields(table.stdout), " "); table.code != 0 || got != "QUEUE TENANTS batch * default * gpu acme,bravo" {
		t.Errorf("queue list = %d %q, want batch, default and gpu", table.code, table.stdout)
	}
	nd := submitAt(n.URL, "queue", "list", "--json")
	var rows []queueRow
	for line := range strings.Lines(nd.stdout) {
		var r queueRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 3 || rows[2].Queue != "gpu" || strings.Join(rows[2].Tenants, ",") != "acme,bravo" || rows[0].Tenants == nil {
		t.Errorf("queue list --json = %q, want 3 rows, gpu for acme and bravo", nd.stdout)
	}
	if got := submitAt(n.URL, "queue", "remove", "scratch"); got.code != exitOther || strings.Count(got.stderr, "\n") != 1 {
		t.Errorf("queue remove of an undeclared queue = %d %q, want 125 and one line", got.code, got.stderr)
	}

	if got := submitAt(n.URL, "tenant", "set", "acme", "--max-kept-bytes", "1m", "--max-jobs-kept", "100", "--max-artifact-bytes", "64k"); got.code != 0 ||
		!strings.Contains(got.stdout, "max_kept_bytes 1048576, max_jobs_kept 100, max_artifact_bytes 65536") {
		t.Errorf("tenant set with storage bounds = %d %q %q", got.code, got.stdout, got.stderr)
	}
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "RUNFLEET_TENANTS")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := tenant.Get(t.Context(), kv, "acme"); err != nil || !ok || p.MaxKeptBytes != 1<<20 || p.MaxJobsKept != 100 || p.MaxArtifactBytes != 64<<10 {
		t.Errorf("acme's policy = %+v, %v, %v; want its storage bounds", p, ok, err)
	}

	dead := "nats://127.0.0.1:1" // checked before anything is connected
	for _, bad := range [][]string{
		{"queue"}, {"queue", "bogus"}, {"queue", "add"}, {"queue", "add", "Bad"}, {"queue", "add", "a", "b"},
		{"queue", "add", "gpu", "--tenants", "acme,Bad"}, {"queue", "remove"}, {"queue", "list", "x"},
		{"tenant", "set", "acme", "--max-kept-bytes", "-1"}, {"tenant", "set", "acme", "--max-jobs-kept", "-1"},
	} {
		if got := submitAt(dead, bad...); got.code != exitUsage || strings.Count(got.stderr, "\n") != 1 || strings.Contains(got.stderr, "unreachable") {
			t.Errorf("submit %q = %d %q, want 2 (usage) and one line about the input", bad, got.code, got.stderr)
		}
	}

	doc, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []string{"submit queue add NAME [--tenants T1,T2]", "submit queue list [--json]", "submit queue remove NAME",
		"[--max-kept-bytes SIZE] [--max-jobs-kept N] [--max-artifact-bytes SIZE]"} {
		if !strings.Contains(string(doc), usage) {
			t.Errorf("docs/cli.md lacks %q", usage)
		}
	}
}

// TestWorkersBounded (issue 37 item 8): anyone allowed to answer the workers' ping can, so submit
// workers ignores a heartbeat from the future or with an overlong id, and lists at most 1,000
// workers however many ids answer.
func TestWorkersBounded(t *testing.T) {
	n := testenv.StartNATS(t)
	nc := n.Conn()
	sub, err := nc.Subscribe("runfleet.workers.ping", func(m *nats.Msg) {
		beat := func(id string, at time.Time) {
			b, _ := json.Marshal(protocol.Heartbeat{ID: id, At: at})
			_ = nc.Publish(m.Reply, b)
		}
		beat("future", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
		beat(strings.Repeat("x", protocol.MaxWorkerIDBytes+1), time.Now())
		for i := range 1500 {
			beat(fmt.Sprintf("forged-%04d", i), time.Now())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	got := submitAt(n.URL, "workers", "--json")
	lines := strings.Count(got.stdout, "\n")
	if got.code != 0 || lines != protocol.MaxWorkersListed || strings.Contains(got.stdout, `"future"`) || strings.Contains(got.stdout, "xxxx") {
		t.Errorf("submit workers under a flood = %d, %d lines (future listed: %v), want %d and neither forged row",
			got.code, lines, strings.Contains(got.stdout, `"future"`), protocol.MaxWorkersListed)
	}
}
