package backlog_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/backlog"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBacklogWithoutWorkers follows a queue from never served (no consumer: waiting 1, enough to
// wake a worker) through its discovery consumer (every job, whatever its tenant) to a tenant
// consumer with jobs delivered and not acked (running), with no worker anywhere, and reads it as
// a snapshot, as GET /v1/backlog and as Prometheus series.
func TestBacklogWithoutWorkers(t *testing.T) {
	ctx := t.Context()
	nc := testenv.StartNATS(t).Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	if err := protocol.EnsureStreams(ctx, js, s, protocol.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	submit := func(tenant string, n int) {
		c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: tenant, SkipQueueCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := c.Submit(ctx, "", job.Request{Language: "python3", Code: "pass"}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(job.DefaultTenant, 3)
	submit("acme", 2)

	r := backlog.New(js, s, backlog.Options{Queues: []string{job.DefaultQueue}, TTL: time.Nanosecond,
		Declared: func() []string { return []string{"declared"} },
		TenantLabel: func(t string) string {
			if t == job.DefaultTenant {
				return t
			}
			return "other"
		}})
	queueIs := func(what string, want backlog.Figures) {
		t.Helper()
		testenv.WaitFor(t, 10*time.Second, what, func() bool {
			snap, err := r.Snapshot(ctx)
			got := snap.Queues[job.DefaultQueue]
			got.OldestWait = 0
			return err == nil && got == want
		})
	}
	queueIs("a queue never served: waiting 1", backlog.Figures{Waiting: 1, Jobs: 1})
	if _, err := queue.Discovery(ctx, js, s, job.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	queueIs("every job through the discovery consumer", backlog.Figures{Waiting: 5, Jobs: 5})
	src, err := queue.TenantConsumer(ctx, js, s, queue.Pair{Queue: job.DefaultQueue, Tenant: job.DefaultTenant}, 1, time.Time{}, queue.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := src.FetchNoWait(2)
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	queueIs("two delivered and not acked", backlog.Figures{Waiting: 5, Running: 2, Jobs: 7})
	snap, err := r.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Tenants[queue.Pair{Queue: job.DefaultQueue, Tenant: job.DefaultTenant}]; got.Waiting != 1 || got.Running != 2 || got.Jobs != 3 {
		t.Errorf("tenant default = %+v, want waiting 1, running 2", got)
	}
	if got := snap.Queues[job.DefaultQueue].OldestWait; got < 0 || got > time.Hour {
		t.Errorf("oldest wait = %v, want the age of the first job", got)
	}

	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, tt := range []struct {
		name, query string
		code        int
		want        string
	}{
		{"default queue", "", http.StatusOK, `"queue":"default","waiting":5,"running":2,"jobs":7`},
		{"named queue", "?queue=default", http.StatusOK, `"jobs":7`},
		{"one tenant", "?queue=default&tenant=default", http.StatusOK, `"tenant":"default","waiting":1,"running":2,"jobs":3`},
		{"declared, never used", "?queue=declared", http.StatusOK, `"queue":"declared","waiting":0,"running":0,"jobs":0,"oldest_wait_seconds":0`},
		{"neither declared nor served", "?queue=other", http.StatusNotFound, `"reason":"unknown_queue"`},
		{"bad queue", "?queue=a.b", http.StatusBadRequest, `"reason":"invalid_query"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/v1/backlog" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.want) {
				t.Errorf("GET /v1/backlog%s = %d %s, want %d with %s", tt.query, resp.StatusCode, body, tt.code, tt.want)
			}
		})
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	want := `
# HELP runfleet_queue_running_jobs Jobs of the queue delivered to a worker and not yet acked: claimed or running.
# TYPE runfleet_queue_running_jobs gauge
runfleet_queue_running_jobs{queue="declared"} 0
runfleet_queue_running_jobs{queue="default"} 2
# HELP runfleet_queue_waiting_jobs Jobs stored on the queue and not yet delivered to a worker, read from JetStream (served with no worker running).
# TYPE runfleet_queue_waiting_jobs gauge
runfleet_queue_waiting_jobs{queue="declared"} 0
runfleet_queue_waiting_jobs{queue="default"} 5
# HELP runfleet_tenant_waiting_jobs runfleet_queue_waiting_jobs per tenant ("other": tenants without a policy of their own).
# TYPE runfleet_tenant_waiting_jobs gauge
runfleet_tenant_waiting_jobs{queue="default",tenant="default"} 1
# HELP runfleet_backlog_up 1 when the last read of the backlog from JetStream succeeded, 0 when it failed (and the backlog's series are absent).
# TYPE runfleet_backlog_up gauge
runfleet_backlog_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "runfleet_queue_waiting_jobs", "runfleet_queue_running_jobs",
		"runfleet_tenant_waiting_jobs", "runfleet_backlog_up"); err != nil {
		t.Error(err)
	}
}

// TestBacklogUnreachable: a read that fails is runfleet_backlog_up 0 and a 503, never a failed
// scrape.
func TestBacklogUnreachable(t *testing.T) {
	n := testenv.StartNATS(t)
	nc := n.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	r := backlog.New(js, s, backlog.Options{Queues: []string{job.DefaultQueue}, TTL: time.Nanosecond, ReadTimeout: time.Second})
	// No stream: the read fails as it would with the server away.
	if v := testutil.ToFloat64(upOnly{r}); v != 0 {
		t.Errorf("runfleet_backlog_up = %v, want 0", v)
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/backlog", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"unavailable"`) {
		t.Errorf("GET /v1/backlog = %d %s, want 503 unavailable", rec.Code, rec.Body)
	}
}

// upOnly is the reader's collector reduced to runfleet_backlog_up, which it sends alone on a
// failed read.
type upOnly struct{ *backlog.Reader }
