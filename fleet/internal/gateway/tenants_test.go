package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// addKey gives tenant name a new API key through the bucket and waits until the gateway takes it.
func (f *fleet) addKey(name string, p tenant.Policy) string {
	f.t.Helper()
	key := tenant.NewKey()
	if _, err := tenant.Update(f.t.Context(), f.kv, name, func(q *tenant.Policy) {
		keys := append(q.APIKeysSHA256, tenant.HashKey(key))
		*q = p
		q.APIKeysSHA256 = keys
	}); err != nil {
		f.t.Fatal(err)
	}
	testenv.WaitFor(f.t, 5*time.Second, "the gateway takes "+name+"'s new key", func() bool {
		code, _ := f.do("GET", "/v1/jobs/no-such-job", key, nil)
		return code != http.StatusUnauthorized
	})
	return key
}

// answer sends a request with key and returns its status and body, the job's id in the body
// replaced by ID; a stream still open after a few seconds is cut there.
func (f *fleet) answer(method, path, key, id string, body []byte) (int, string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 3*time.Second)
	defer cancel()
	resp := f.send(ctx, method, path, key, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a stream cut by ctx ends here
	return resp.StatusCode, strings.ReplaceAll(string(b), id, "ID")
}

// submitAs stores a job with key and returns its id.
func (f *fleet) submitAs(key, query, body string) string {
	f.t.Helper()
	code, b := f.do("POST", "/v1/jobs"+query, key, []byte(body))
	var out struct {
		JobID string `json:"job_id"`
	}
	if code != http.StatusAccepted || json.Unmarshal(b, &out) != nil {
		f.t.Fatalf("POST /v1/jobs%s = %d %s, want 202", query, code, b)
	}
	return out.JobID
}

// tenantOf is the tenant job id was stored under: the one tenant whose request of id is kept.
func (f *fleet) tenantOf(id string) string {
	f.t.Helper()
	in, err := runfleet.NewInspector(f.nats.Conn(), runfleet.InspectorOptions{Prefix: f.prefix})
	if err != nil {
		f.t.Fatal(err)
	}
	tenants, err := in.Tenants(f.t.Context(), id)
	if err != nil || len(tenants) != 1 {
		f.t.Fatalf("tenants of %s = %v, %v; want one", id, tenants, err)
	}
	return tenants[0]
}

// as is a client of tenant on the fleet.
func (f *fleet) as(tenant string) *runfleet.Client {
	f.t.Helper()
	in, err := runfleet.NewInspector(f.nats.Conn(), runfleet.InspectorOptions{Prefix: f.prefix})
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := in.Tenant(tenant)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// settleOf waits for tenant's job id's settlement.
func (f *fleet) settleOf(tenant, id string) job.Settlement {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 60*time.Second)
	defer cancel()
	st, err := f.as(tenant).Watch(ctx, id, nil)
	if err != nil {
		f.t.Fatalf("settlement of %s's %s: %v", tenant, id, err)
	}
	return st
}

// TestTenantIsolation: a tenant's key reaches its own jobs only, through every route that names
// a job, lists jobs, or redrives them; another tenant's job is answered exactly as an unknown one.
func TestTenantIsolation(t *testing.T) {
	f := newFleet(t, gateway.Options{MaxWait: 10 * time.Second})
	f.startWorker()
	keyA := f.addKey("alpha", tenant.Policy{})
	keyB := f.addKey("beta", tenant.Policy{})
	const failing = `{"language":"python3","code":"import sys; sys.exit(3)"}`

	own := f.submitAs(keyA, "", failing)
	foreign := f.submitAs(keyB, "", failing)
	foreign2 := f.submitAs(keyB, "", failing) // beta has two failed jobs, alpha one
	waiting := f.submitAs(keyB, "?queue=idle", failing)
	unknown := "no-such-job-" + uuid.NewString()[:8]
	f.settleOf("alpha", own)
	for _, id := range []string{foreign, foreign2} {
		f.settleOf("beta", id)
	}
	if got := f.tenantOf(own); got != "alpha" {
		t.Errorf("alpha's job stored under tenant %q", got)
	}
	if got := f.tenantOf(waiting); got != "beta" {
		t.Errorf("beta's job stored under tenant %q", got)
	}

	// Submitting: a tenant's key files under its own tenant only; the operator names any.
	if code, b := f.do("POST", "/v1/jobs?tenant=beta", keyA, []byte(failing)); code != http.StatusForbidden {
		t.Errorf("alpha's key submitting for beta = %d %s, want 403", code, b)
	}
	if code, b := f.do("POST", "/v1/jobs?tenant=Not.Valid", apiKey, []byte(failing)); code != http.StatusBadRequest {
		t.Errorf("operator naming a bad tenant = %d %s, want 400", code, b)
	}
	if id := f.submitAs(apiKey, "?tenant=gamma&queue=idle", failing); f.tenantOf(id) != "gamma" {
		t.Errorf("operator's ?tenant=gamma stored under %q", f.tenantOf(id))
	}
	if id := f.submitAs(apiKey, "?queue=idle", failing); f.tenantOf(id) != job.DefaultTenant {
		t.Errorf("operator's job stored under %q, want default", f.tenantOf(id))
	}
	// The dify route files under the key's tenant too.
	before := f.jobSubjects("alpha")
	if code, b := f.do("POST", "/v1/sandbox/run", keyA, []byte(`{"language":"python3","code":"print(1)"}`), "Content-Type", "application/json"); code != http.StatusOK {
		t.Errorf("dify run with alpha's key = %d %s", code, b)
	}
	if after := f.jobSubjects("alpha"); after != before+1 {
		t.Errorf("alpha's job subjects after a dify run = %d, want %d", after, before+1)
	}

	// Listing and bulk redrives are forced to the key's tenant, whatever they ask.
	testenv.WaitFor(t, 30*time.Second, "both tenants' jobs indexed", func() bool {
		l := f.listed(apiKey, "status=failed")
		return slices.Contains(l, foreign) && slices.Contains(l, foreign2) && slices.Contains(l, own)
	})
	for _, q := range []string{"status=failed", "status=failed&tenant=beta"} {
		got := f.listed(keyA, q)
		if !slices.Contains(got, own) || slices.Contains(got, foreign) {
			t.Errorf("alpha's list (%s) = %v, want %s and not beta's %s", q, got, own, foreign)
		}
	}
	code, b := f.do("POST", "/v1/redrives", keyA, []byte(`{"status":"failed","tenant":"beta","dry_run":true}`))
	var run job.RedriveRun
	if json.Unmarshal(b, &run); code != http.StatusOK || run.Total != 1 || run.Filter.Tenant != "alpha" {
		t.Errorf("alpha's dry run naming beta = %d %s, want 200 counting alpha's one failed job", code, b)
	}
	code, b = f.do("POST", "/v1/redrives", keyB, []byte(`{"status":"failed","rate_per_s":0.01}`))
	if json.Unmarshal(b, &run); code != http.StatusAccepted || run.ID == "" {
		t.Fatalf("beta's bulk redrive = %d %s", code, b)
	}
	unknownRun := "no-such-run-" + uuid.NewString()[:8]
	for _, method := range []string{"GET", "DELETE"} {
		c1, b1 := f.answer(method, "/v1/redrives/"+run.ID, keyA, run.ID, nil)
		c2, b2 := f.answer(method, "/v1/redrives/"+unknownRun, keyA, unknownRun, nil)
		if c1 != c2 || b1 != b2 {
			t.Errorf("%s beta's run with alpha's key = %d %s, unknown run = %d %s: want the same", method, c1, b1, c2, b2)
		}
	}
	if code, b := f.do("DELETE", "/v1/redrives/"+run.ID, keyB, nil); code != http.StatusOK {
		t.Errorf("beta stopping its own run = %d %s", code, b)
	}

	routes := []struct {
		name, method, path string // path has %s for the job's id
	}{
		{"settlement", "GET", "/v1/jobs/ID"},
		{"inspect", "GET", "/v1/jobs/ID?request=true"},
		{"events", "GET", "/v1/jobs/ID/events"},
		{"events url", "POST", "/v1/jobs/ID/events-url"},
		{"artifact", "GET", "/v1/jobs/ID/artifacts/out.txt"},
		{"cancel", "DELETE", "/v1/jobs/ID"},
		{"redrive", "POST", "/v1/jobs/ID/redrive"},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			path := func(id string) string { return strings.Replace(rt.path, "ID", id, 1) }
			wantCode, want := f.answer(rt.method, path(unknown), keyA, unknown, nil)
			if wantCode != http.StatusNotFound {
				t.Fatalf("%s of an unknown job with a tenant's key = %d %s, want 404", rt.name, wantCode, want)
			}
			for _, id := range []string{foreign, waiting} {
				if code, got := f.answer(rt.method, path(id), keyA, id, nil); code != wantCode || got != want {
					t.Errorf("%s of beta's job with alpha's key = %d %s; want %d %s, as an unknown job", rt.name, code, got, wantCode, want)
				}
			}
			if code, got := f.answer(rt.method, path(own), keyA, own, nil); code == http.StatusNotFound && got == want {
				t.Errorf("%s of alpha's own job with its key = %d %s, as an unknown job", rt.name, code, got)
			}
		})
	}
	// Beta's waiting job was not cancelled by alpha's DELETE.
	if info, err := f.as("beta").Lookup(t.Context(), waiting); err != nil || info.State != 1 {
		t.Errorf("beta's waiting job after alpha's cancel: %+v %v, want queued", info, err)
	}
	if code, _ := f.do("GET", "/metrics", keyA, nil); code != http.StatusForbidden {
		t.Errorf("GET /metrics with a tenant's key = %d, want 403", code)
	}

	// The web view maps the keys the same way.
	c := f.browser()
	base := f.srv.URL + "/ui/"
	if resp := login(t, c, base, keyA); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("web view login with alpha's key = %d", resp.StatusCode)
	}
	if code, _ := get(t, c, base+"jobs/"+foreign); code != http.StatusNotFound {
		t.Errorf("web view: beta's job with alpha's session = %d, want 404", code)
	}
	if code, _ := get(t, c, base+"jobs/"+foreign+"?tenant=beta"); code != http.StatusNotFound {
		t.Errorf("web view: beta's job named with ?tenant=beta, alpha's session = %d, want 404", code)
	}
	if code, _ := get(t, c, base+"jobs/"+own); code != http.StatusOK {
		t.Errorf("web view: alpha's job with its session = %d, want 200", code)
	}
	if code, page := get(t, c, base+"tenants"); code != http.StatusOK || !strings.Contains(page, ">alpha<") || strings.Contains(page, ">beta<") {
		t.Errorf("web view: tenants page of alpha = %d, want alpha's row only:\n%s", code, page)
	}
	// The overview shows alpha its own queue rows, with their settled jobs, and no other tenant's.
	var page string
	testenv.WaitFor(t, 30*time.Second, "alpha's queue row with its settled job", func() bool {
		_, page = get(t, c, base)
		return strings.Contains(page, `<tr class="queue-row"><td>default</td><td>alpha</td>`) && strings.Contains(page, "tenant=alpha&amp;since=1h")
	})
	if strings.Contains(page, "<td>beta</td>") {
		t.Errorf("web view: alpha's overview shows beta's row:\n%s", page)
	}
}

// listed is the ids GET /v1/jobs lists with key and query q (one page).
func (f *fleet) listed(key, q string) []string {
	f.t.Helper()
	code, b := f.do("GET", "/v1/jobs?limit=100&"+q, key, nil)
	var l job.JobList
	if code != http.StatusOK || json.Unmarshal(b, &l) != nil {
		f.t.Fatalf("GET /v1/jobs?%s = %d %s", q, code, b)
	}
	var ids []string
	for _, j := range l.Jobs {
		ids = append(ids, j.JobID)
	}
	return ids
}

// jobSubjects counts the job subjects of tenant on the default queue.
func (f *fleet) jobSubjects(tenant string) int {
	f.t.Helper()
	s, err := f.js.Stream(f.t.Context(), f.client.Subjects().JobsStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(f.t.Context(), jetstream.WithSubjectFilter(f.client.Subjects().TenantJobs(job.DefaultQueue, tenant)))
	if err != nil {
		f.t.Fatal(err)
	}
	return len(info.State.Subjects)
}

// TestTenantQueueFull: past max_queued a submit is 429 tenant_queue_full with Retry-After, on
// both APIs, and nothing is stored; other tenants go on.
func TestTenantQueueFull(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	key := f.addKey("small", tenant.Policy{MaxQueued: 3})
	// No worker runs: the tenant's consumer is made here, as a worker's discovery would, so
	// that its Pending counts the stored jobs.
	if _, err := queue.TenantConsumer(t.Context(), f.js, f.client.Subjects(), queue.Pair{Queue: job.DefaultQueue, Tenant: "small"},
		0, time.Time{}, queue.ConsumerOptions{}); err != nil {
		t.Fatal(err)
	}
	const body = `{"language":"python3","code":"print(1)"}`
	for range 3 {
		f.submitAs(key, "", body)
	}
	full := func(what string) {
		t.Helper()
		stored := f.storedJobs()
		checks := []struct {
			name, path, key string
			body            string
			want            string
		}{
			{"native", "/v1/jobs", key, body, `"reason":"tenant_queue_full"`},
			{"native, operator for the tenant", "/v1/jobs?tenant=small", apiKey, body, `"reason":"tenant_queue_full"`},
			{"dify", "/v1/sandbox/run", key, body, `"code":-429`},
		}
		for _, c := range checks {
			resp := f.send(t.Context(), "POST", c.path, c.key, []byte(c.body), "Content-Type", "application/json")
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), c.want) || resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s: %s past max_queued = %d %s (Retry-After %q), want 429 with %s and Retry-After",
					what, c.name, resp.StatusCode, b, resp.Header.Get("Retry-After"), c.want)
			}
		}
		if got := f.storedJobs(); got != stored {
			t.Errorf("%s: the jobs stream holds %d messages after the refusals, %d before: want nothing stored", what, got, stored)
		}
	}
	full("counted by this gateway") // within one snapshot, its own admissions count
	// Once a new snapshot is read, the server's count refuses too.
	testenv.WaitFor(t, 5*time.Second, "the snapshot to show 3 queued", func() bool {
		l, err := f.gw.TenantLoads(t.Context())
		return err == nil && l["small"].Queued == 3
	})
	full("counted by the server")
	// The web view's tenants page shows the same count.
	c := f.browser()
	if resp := login(t, c, f.srv.URL+"/ui/", apiKey); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("web view login = %d", resp.StatusCode)
	}
	if code, page := get(t, c, f.srv.URL+"/ui/tenants"); code != http.StatusOK || !strings.Contains(page, ">small</a></td><td><code>{&#34;api_keys_sha256&#34;:&#34;1 keys&#34;,&#34;max_queued&#34;:3}</code></td><td>3</td><td>0</td>") {
		t.Errorf("web view tenants page = %d, want small's policy, 3 queued and 0 running:\n%s", code, page)
	}
	// The overview shows the queue's row: 3 waiting, none running, and how long the oldest has.
	if code, page := get(t, c, f.srv.URL+"/ui/"); code != http.StatusOK ||
		!regexp.MustCompile(`<td>default</td><td>small</td><td>(yes|<span class="error">no worker</span>)</td><td>3</td><td>0</td><td>\d+(m\d+)?s</td>`).MatchString(page) {
		t.Errorf("web view overview = %d, want default/small with 3 waiting and the oldest wait:\n%s", code, page)
	}
	// Another tenant, and one without a policy, go on.
	f.submitAs(apiKey, "?tenant=other-one", body)
	f.submitAs(apiKey, "", body)
	code, b := f.do("GET", "/metrics", apiKey, nil)
	for _, want := range []string{
		`runfleet_gateway_tenant_jobs_submitted_total{tenant="small"} 3`,
		`runfleet_gateway_tenant_jobs_refused_total{reason="tenant_queue_full",tenant="small"} 6`,
		`runfleet_gateway_tenant_jobs_submitted_total{tenant="other"} 2`,
	} {
		if code != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, b)
		}
	}
}

// TestTenantKeyLive: a key added to a tenant's policy is accepted within 5 s, without a restart,
// and refused within 5 s of its removal.
func TestTenantKeyLive(t *testing.T) {
	t.Parallel()
	f := newFleet(t, gateway.Options{})
	key := tenant.NewKey()
	probe := func() int {
		code, _ := f.do("GET", "/v1/jobs/no-such-job", key, nil)
		return code
	}
	if code := probe(); code != http.StatusUnauthorized {
		t.Fatalf("a key no policy lists = %d, want 401", code)
	}
	if _, err := tenant.Update(t.Context(), f.kv, "live", func(p *tenant.Policy) {
		p.APIKeysSHA256 = append(p.APIKeysSHA256, tenant.HashKey(key))
	}); err != nil {
		t.Fatal(err)
	}
	took := testenv.WaitFor(t, 5*time.Second, "the added key accepted", func() bool { return probe() == http.StatusNotFound })
	t.Logf("added key accepted after %v", took)
	if _, err := tenant.Update(t.Context(), f.kv, "live", func(p *tenant.Policy) { p.APIKeysSHA256 = nil }); err != nil {
		t.Fatal(err)
	}
	took = testenv.WaitFor(t, 5*time.Second, "the removed key refused", func() bool { return probe() == http.StatusUnauthorized })
	t.Logf("removed key refused after %v", took)
}
