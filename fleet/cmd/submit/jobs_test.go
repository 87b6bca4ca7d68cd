package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

func TestJobsAndShow(t *testing.T) {
	var ids []string
	for _, code := range []string{"import sys; sys.exit(5)", "import sys; sys.exit(6)"} {
		got := submit(t, "", "--no-wait", "--lang", "python3", "--code", code)
		id := strings.TrimSpace(got.stdout)
		if w := submit(t, "", "watch", id); w.code == 0 {
			t.Fatalf("watch %s = %d, want the job's exit code", id, w.code)
		}
		ids = append(ids, id)
	}
	var nd call
	// The index lists a job right after its settlement is stored, which watch saw.
	testenv.WaitFor(t, 10*time.Second, "both jobs listed", func() bool {
		nd = submit(t, "", "jobs", "--status", "failed", "--since", "10m", "--json", "--limit", "0")
		return nd.code == 0 && strings.Contains(nd.stdout, ids[0]) && strings.Contains(nd.stdout, ids[1])
	})
	pos := map[string]int{}
	for i, line := range strings.Split(strings.TrimSpace(nd.stdout), "\n") {
		var l job.Listed
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if l.Status != job.StatusFailed {
			t.Errorf("listed %+v with --status failed", l)
		}
		pos[l.JobID] = i
	}
	i0, ok0 := pos[ids[0]]
	i1, ok1 := pos[ids[1]]
	if !ok0 || !ok1 || i1 > i0 {
		t.Errorf("jobs --json = %q, want both jobs, newest (%s) first", nd.stdout, ids[1])
	}
	table := submit(t, "", "jobs", "--status", "failed", "--limit", "1")
	if lines := strings.Split(strings.TrimSpace(table.stdout), "\n"); table.code != 0 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "exit_nonzero") {
		t.Errorf("jobs --limit 1 = %d %q %q, want a header and one failed job", table.code, table.stdout, table.stderr)
	}
	// A submitter's RUNFLEET_QUEUE and RUNFLEET_TENANT name where it publishes: they must not filter
	// a listing, nor turn `redrive ID` into a bulk filter (docs/cli.md).
	env := map[string]string{"RUNFLEET_TENANT": "acme", "RUNFLEET_QUEUE": "other"}
	if got := submitEnv(t, env, "", "jobs", "--status", "failed", "--since", "10m", "--limit", "0"); got.code != 0 ||
		!strings.Contains(got.stdout, ids[0]) {
		t.Errorf("jobs with RUNFLEET_TENANT and RUNFLEET_QUEUE set = %d %q %q, want the default tenant's job %s", got.code, got.stdout, got.stderr, ids[0])
	}
	if got := submitEnv(t, env, "", "redrive", ids[0], "--no-wait"); got.code != 0 || !job.ValidID(strings.TrimSpace(got.stdout)) {
		t.Errorf("redrive ID with RUNFLEET_TENANT and RUNFLEET_QUEUE set = %d %q %q, want the new job's id", got.code, got.stdout, got.stderr)
	}
	show := submit(t, "", "show", ids[0])
	var st job.Settlement
	if err := json.Unmarshal([]byte(show.stdout), &st); show.code != 0 || err != nil || st.JobID != ids[0] || *st.ExitCode != 5 {
		t.Errorf("show %s = %d %q %q (%v), want its settlement", ids[0], show.code, show.stdout, show.stderr, err)
	}
	withReq := submit(t, "", "show", ids[1], "--request")
	dec := json.NewDecoder(strings.NewReader(withReq.stdout))
	var st2 job.Settlement
	var stored struct {
		Queue, Tenant string
		Request       job.Request
	}
	if err := dec.Decode(&st2); err != nil || dec.Decode(&stored) != nil || withReq.code != 0 ||
		stored.Request.Code != "import sys; sys.exit(6)" || stored.Queue != job.DefaultQueue {
		t.Errorf("show %s --request = %d %q %q, want the settlement then the stored request", ids[1], withReq.code, withReq.stdout, withReq.stderr)
	}
	for _, bad := range [][]string{{"jobs", "--status", "bogus"}, {"jobs", "--since", "yesterday"}, {"jobs", "x"}, {"show"}, {"show", "no such"}} {
		if got := submit(t, "", bad...); got.code != exitUsage || strings.Count(got.stderr, "\n") != 1 {
			t.Errorf("submit %q = %d %q, want 2 (usage) and one line", bad, got.code, got.stderr)
		}
	}
}
