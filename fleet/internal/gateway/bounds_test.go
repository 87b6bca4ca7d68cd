package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// declare replaces the fleet's queue declarations (nil: none at all) and waits until the
// gateway's view holds them.
func (f *fleet) declare(queues map[string]protocol.QueueDeclaration) {
	f.t.Helper()
	if queues == nil {
		if err := f.kv.Delete(f.t.Context(), protocol.QueuesKey); err != nil {
			f.t.Fatal(err)
		}
		testenv.WaitFor(f.t, 5*time.Second, "the gateway drops the declarations", func() bool { return !f.tenants.Declared() })
		return
	}
	if _, err := tenant.UpdateQueues(f.t.Context(), f.kv, func(q *protocol.Queues) error {
		q.Queues = queues
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	testenv.WaitFor(f.t, 5*time.Second, "the gateway takes the declarations", func() bool {
		for name, d := range queues {
			for _, t := range append(d.Tenants, "") {
				if t != "" && f.tenants.QueueAllowed(name, t, func(string) bool { return false }) != nil {
					return false
				}
			}
		}
		return f.tenants.Declared()
	})
}

// refusal is an error answer's reason, or "" when the body is not one.
func refusal(b []byte) string {
	var e struct{ Reason string }
	_ = json.Unmarshal(b, &e)
	return e.Reason
}

// TestUndeclaredQueues (issue 37, attack 5): a tenant with max_queued 3 posts 20 jobs to 20
// queues no worker serves. Each is 404 unknown_queue and nothing is stored: in a fleet that
// declares no queues (a queue is declared when a worker serves it) and in one that declares
// its queues; a queue declared for another tenant is refused in the same words.
func TestUndeclaredQueues(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	alpha := f.addKey("alpha", tenant.Policy{MaxQueued: 3})
	bravo := f.addKey("bravo", tenant.Policy{})
	const body = `{"language":"python3","code":"print(1)"}`
	flood := func(what string) {
		t.Helper()
		stored := f.storedJobs()
		for i := range 20 {
			q := fmt.Sprintf("parking-%d", i)
			code, b := f.do("POST", "/v1/jobs?queue="+q, alpha, []byte(body))
			if code != http.StatusNotFound || refusal(b) != "unknown_queue" {
				t.Errorf("%s: POST ?queue=%s = %d %s, want 404 unknown_queue", what, q, code, b)
			}
		}
		if got := f.storedJobs(); got != stored {
			t.Errorf("%s: %d jobs stored after the refusals, %d before: want none stored", what, got, stored)
		}
	}

	f.declare(nil)
	flood("no declarations")
	// A queue with a discovery consumer is served: a fleet without declarations takes it.
	if _, err := queue.Discovery(t.Context(), f.js, f.client.Subjects(), "served"); err != nil {
		t.Fatal(err)
	}
	f.submitAs(alpha, "?queue=served", body)
	f.submitAs(alpha, "", body) // default, always

	f.declare(map[string]protocol.QueueDeclaration{"gpu": {Tenants: []string{"bravo"}}, "batch": {}})
	flood("declared queues")
	if code, b := f.do("POST", "/v1/jobs?queue=served", alpha, []byte(body)); code != http.StatusNotFound || refusal(b) != "unknown_queue" {
		t.Errorf("POST ?queue=served, served but not declared = %d %s, want 404 unknown_queue", code, b)
	}
	code, forOther := f.do("POST", "/v1/jobs?queue=gpu", alpha, []byte(body))
	_, unknown := f.do("POST", "/v1/jobs?queue=zzz", alpha, []byte(body))
	if code != http.StatusNotFound || strings.ReplaceAll(string(forOther), "gpu", "Q") != strings.ReplaceAll(string(unknown), "zzz", "Q") {
		t.Errorf("POST ?queue=gpu, declared for bravo only = %d %s; want 404 in the words of an unknown queue (%s)", code, forOther, unknown)
	}
	f.submitAs(bravo, "?queue=gpu", body)
	f.submitAs(alpha, "?queue=batch", body)
	code, b := f.do("GET", "/metrics", apiKey, nil)
	if want := `runfleet_gateway_tenant_jobs_refused_total{reason="unknown_queue",tenant="alpha"} 43`; code != http.StatusOK || !strings.Contains(string(b), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestMaxQueuedAcrossQueues: max_queued counts a tenant's jobs on every queue: with 3 allowed,
// one job on each of three declared queues fills it, and a fourth on any queue is refused.
func TestMaxQueuedAcrossQueues(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	f.declare(map[string]protocol.QueueDeclaration{"q1": {}, "q2": {}})
	key := f.addKey("small", tenant.Policy{MaxQueued: 3})
	queues := []string{job.DefaultQueue, "q1", "q2"}
	for _, q := range queues {
		// No worker runs: the consumers are made here, as a worker's discovery would.
		if _, err := queue.TenantConsumer(t.Context(), f.js, f.client.Subjects(), queue.Pair{Queue: q, Tenant: "small"},
			0, time.Time{}, queue.ConsumerOptions{}); err != nil {
			t.Fatal(err)
		}
		f.submitAs(key, "?queue="+q, `{"language":"python3","code":"print(1)"}`)
	}
	testenv.WaitFor(t, 5*time.Second, "the snapshot to show 3 queued", func() bool {
		l, err := f.gw.TenantLoads(t.Context())
		return err == nil && l["small"].Queued == 3
	})
	for _, q := range queues {
		if code, b := f.do("POST", "/v1/jobs?queue="+q, key, []byte(`{"language":"python3","code":"print(1)"}`)); code != http.StatusTooManyRequests || refusal(b) != "tenant_queue_full" {
			t.Errorf("POST ?queue=%s past max_queued over three queues = %d %s, want 429 tenant_queue_full", q, code, b)
		}
	}
}

// TestStorageBounds (issue 37, attack 4): with a small jobs stream, acme fills its own
// max_kept_bytes with finished jobs; its next submit is 429 tenant_storage_full and stores
// nothing, while bravo's jobs are stored and run. acme's artifacts stop at its
// max_artifact_bytes (the job says why); bravo's are whole. max_jobs_kept refuses the same way.
func TestStorageBounds(t *testing.T) {
	f := newFleet(t, gateway.Options{MaxWait: time.Minute})
	f.startWorker("--jobs-max-bytes", "96k")
	acme := f.addKey("acme", tenant.Policy{MaxKeptBytes: 24 << 10, MaxArtifactBytes: 1500})
	bravo := f.addKey("bravo", tenant.Policy{})
	big := fmt.Sprintf(`{"language":"python3","code":"print(1) # %s"}`, strings.Repeat("x", 5000))
	refused := false
	for i := range 20 {
		code, b := f.do("POST", "/v1/jobs?wait=true", acme, []byte(big))
		if code == http.StatusOK {
			continue
		}
		if code != http.StatusTooManyRequests || refusal(b) != "tenant_storage_full" || !strings.Contains(string(b), `"bound":"max_kept_bytes"`) {
			t.Fatalf("acme's job %d = %d %s, want 200 or 429 tenant_storage_full (max_kept_bytes)", i, code, b)
		}
		if i < 4 {
			t.Errorf("acme refused after %d jobs of 5 KB, want about 24 KiB of them", i)
		}
		refused = true
		break
	}
	if !refused {
		t.Fatal("acme stored 20 jobs of 5 KB past its max_kept_bytes of 24 KiB")
	}
	stored := f.storedJobs()
	if code, b := f.do("POST", "/v1/jobs", acme, []byte(big)); code != http.StatusTooManyRequests {
		t.Errorf("acme again = %d %s, want 429", code, b)
	}
	if got := f.storedJobs(); got != stored {
		t.Errorf("jobs stored = %d after acme's refusal, %d before", got, stored)
	}
	for i := range 3 {
		code, b := f.do("POST", "/v1/jobs?wait=true", bravo, []byte(big))
		if code != http.StatusOK || !strings.Contains(string(b), `"status":"succeeded"`) {
			t.Errorf("bravo's job %d beside a full acme = %d %s, want 200 succeeded", i, code, b)
		}
	}

	// Artifacts: 1000 bytes each, acme's bound 1500.
	const arts = `{"language":"python3","code":"open('out.txt','w').write('a'*1000)","outputs":["out.txt"]}`
	settle := func(key string) job.Settlement {
		t.Helper()
		return f.settle(f.submitAs(key, "", arts))
	}
	f.addKey("acme", tenant.Policy{MaxArtifactBytes: 1500}) // its kept bytes unbounded now
	if st := settle(acme); len(st.Artifacts) != 1 || st.ArtifactsTruncated {
		t.Errorf("acme's first artifacts = %+v truncated %v, want out.txt whole", st.Artifacts, st.ArtifactsTruncated)
	}
	st := settle(acme)
	if len(st.Artifacts) != 0 || !st.ArtifactsTruncated || st.ArtifactsTruncatedReason != job.ReasonTenantStorageFull || st.Status != job.StatusSucceeded {
		t.Errorf("acme's second artifacts = %+v, truncated %v (%q), status %s; want none, truncated for tenant_storage_full, succeeded",
			st.Artifacts, st.ArtifactsTruncated, st.ArtifactsTruncatedReason, st.Status)
	}
	if st := settle(bravo); len(st.Artifacts) != 1 || st.ArtifactsTruncated {
		t.Errorf("bravo's artifacts beside acme's full bound = %+v truncated %v, want out.txt whole", st.Artifacts, st.ArtifactsTruncated)
	}
	insp, err := runfleet.NewInspector(f.nats.Conn(), runfleet.InspectorOptions{Prefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	// The worker counts a job just after it stores its settlement.
	var u protocol.TenantUsage
	testenv.WaitFor(t, 10*time.Second, "acme's usage to count its 6 jobs", func() bool {
		u, err = insp.TenantUsage(t.Context(), "acme")
		return err == nil && u.JobsKept == 6
	})
	if u.ArtifactBytes != 1000 || u.KeptBytes < 4*5000 {
		t.Errorf("TenantUsage(acme) = %+v; want 1000 artifact bytes and the bytes of its requests", u)
	}
	// Its index rows: 6 kept, 6 allowed.
	f.addKey("acme", tenant.Policy{MaxJobsKept: 6})
	if code, b := f.do("POST", "/v1/jobs", acme, []byte(`{"language":"python3","code":"print(1)"}`)); code != http.StatusTooManyRequests ||
		!strings.Contains(string(b), `"bound":"max_jobs_kept"`) {
		t.Errorf("acme past max_jobs_kept = %d %s, want 429 tenant_storage_full (max_jobs_kept)", code, b)
	}
}

// TestUndeclaredQueueOverNATS: a job published over NATS, past the gateway, on a queue a worker
// serves but the fleet does not declare for its tenant, settles rejected unknown_queue and never
// runs; the declared tenant's job on it runs.
func TestUndeclaredQueueOverNATS(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	f.declare(map[string]protocol.QueueDeclaration{"extra": {Tenants: []string{"acme"}}})
	f.startWorker("--queues", "default,extra,stray")
	c, err := runfleet.NewClient(t.Context(), f.nats.Conn(), runfleet.Options{Prefix: f.prefix, SkipQueueCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	run := func(q, tenant string) job.Settlement {
		t.Helper()
		sub, err := c.Submit(t.Context(), q, job.Request{Language: "python3", Code: "print('ran')"}, &runfleet.SubmitOptions{Tenant: tenant})
		if err != nil {
			t.Fatalf("publish on %s as %s: %v", q, tenant, err)
		}
		return f.settle(sub.ID)
	}
	for _, tc := range []struct{ queue, tenant string }{{"stray", "acme"}, {"extra", "bravo"}} {
		if st := run(tc.queue, tc.tenant); st.Status != job.StatusRejected || st.Reason != job.ReasonUnknownQueue || st.StdoutBytes != 0 {
			t.Errorf("a job of %s on %s = %s %s (%d bytes out), want rejected unknown_queue", tc.tenant, tc.queue, st.Status, st.Reason, st.StdoutBytes)
		}
	}
	if st := run("extra", "acme"); st.Status != job.StatusSucceeded {
		t.Errorf("acme's job on extra = %s %s %s, want succeeded", st.Status, st.Reason, st.Detail)
	}
	// The Go client refuses it first when it checks.
	checked, err := runfleet.NewClient(t.Context(), f.nats.Conn(), runfleet.Options{Prefix: f.prefix, Tenant: "bravo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checked.Submit(t.Context(), "extra", job.Request{Language: "python3", Code: "print(1)"}, nil); !errors.Is(err, runfleet.ErrUnknownQueue) {
		t.Errorf("Submit on extra as bravo with the check = %v, want ErrUnknownQueue", err)
	}
}
