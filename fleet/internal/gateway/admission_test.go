package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/queue"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/protocol"
)

// answer is one HTTP answer of the gateway process.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a request with the API key to the gateway process.
func (p *process) do(t testing.TB, method, path string, body []byte, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, p.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", apiKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}
}

// waiting is the gateway process's runfleet_gateway_waiting.
func (p *process) waiting(t testing.TB) string {
	t.Helper()
	a := p.do(t, "GET", "/metrics", nil)
	for line := range strings.Lines(string(a.body)) {
		if v, ok := strings.CutPrefix(line, "runfleet_gateway_waiting "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// storedJobs is how many job messages the fleet's jobs stream holds.
func (f *fleet) storedJobs() uint64 {
	f.t.Helper()
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), f.client.Subjects().JobsStream())
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestAdmission: the gateway admits a waiting request before it stores its job. Past
// --max-waiting a waiting request is 503 with Retry-After and nothing is stored; a body that
// grows past the limit when stored is 400, never 503.
func TestAdmission(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	const limit = 3
	p := f.startBinary("--max-waiting", "3")
	addr := strings.TrimPrefix(p.URL, "http://")
	conns := holdWaiting(t, addr, limit)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	testenv.WaitFor(t, time.Minute, "the requests waiting", func() bool { return p.waiting(t) == "3" })
	stored := f.storedJobs()
	if stored != limit {
		t.Fatalf("jobs stored = %d, want %d", stored, limit)
	}

	a := p.do(t, "POST", "/v1/jobs?wait=true&queue=idle", []byte(`{"id":"one-too-many","language":"python3","code":"print(1)"}`))
	var e struct{ Reason, Detail string }
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || json.Unmarshal(a.body, &e) != nil || e.Reason != "too_many_waiting" {
		t.Errorf("request %d = %d %s (Retry-After %q), want 503 too_many_waiting with Retry-After", limit+1, a.code, a.body, a.header.Get("Retry-After"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := f.client.Settlement(ctx, "one-too-many"); !errors.Is(err, runfleet.ErrNotFound) {
		t.Errorf("Settlement(one-too-many) = %v, want ErrNotFound: nothing stored", err)
	}

	a = p.do(t, "POST", "/v1/sandbox/run", []byte(`{"language":"python3","code":"print(1)","preload":"","enable_network":true}`), "Content-Type", "application/json")
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !bytes.Contains(a.body, []byte(`"code":-503`)) {
		t.Errorf("dify request over the limit = %d %s, want 503 code -503 with Retry-After", a.code, a.body)
	}
	if n := f.storedJobs(); n != stored {
		t.Errorf("jobs stored = %d after the refusals, want %d", n, stored)
	}

	// A request that does not wait is not bounded.
	if a := p.do(t, "POST", "/v1/jobs?queue=idle", []byte(`{"language":"python3","code":"print(1)"}`)); a.code != http.StatusAccepted {
		t.Errorf("POST without wait = %d %s, want 202", a.code, a.body)
	}
	stored++

	// Under the body limit as sent, over it as stored: every "<" becomes "\u003c".
	body := []byte(`{"language":"python3","code":"` + strings.Repeat("<", 400_000) + `","preload":"","enable_network":true}`)
	conns[0].Close()
	testenv.WaitFor(t, time.Minute, "a place free", func() bool { return p.waiting(t) == "2" })
	a = p.do(t, "POST", "/v1/sandbox/run", body, "Content-Type", "application/json")
	if a.code != http.StatusBadRequest || !bytes.Contains(a.body, []byte(`"code":-400`)) || !bytes.Contains(a.body, []byte("payload_too_large")) {
		t.Errorf("dify body of %d bytes that grows when stored = %d %s, want 400 code -400 payload_too_large", len(body), a.code, clipString(string(a.body)))
	}
	if n := f.storedJobs(); n != stored {
		t.Errorf("jobs stored = %d after the oversized request, want %d", n, stored)
	}
}

// TestAdmissionAcrossAPIs: the native, dify-sandbox, piston and judge0 routes share one
// admission. An undeclared queue, a tenant past a storage bound, a tenant past max_queued and a
// gateway past --max-waiting each refuse a waiting request on every route with the documented
// status and Retry-After, in that API's own envelope, the native reason in it; nothing is stored
// and each route counts the refusal.
func TestAdmissionAcrossAPIs(t *testing.T) {
	f := newFleet(t, gateway.Options{Queue: "gq", MaxWaiting: 1})
	f.startWorker() // announces python3 to piston and judge0, and answers the tenants' usage
	f.declare(map[string]protocol.QueueDeclaration{"idle": {}, "gq": {Tenants: []string{"hoarder", "busy", "patient"}}})
	f.waitAnnounced("python3")
	insp, err := runfleet.NewInspector(f.nats.Conn(), runfleet.InspectorOptions{Prefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"language":"python3","code":"print(1)"}`

	// busy holds one job of its max_queued of 1, counted by the server.
	busy := f.addKey("busy", tenant.Policy{MaxQueued: 1})
	if _, err := queue.TenantConsumer(t.Context(), f.js, f.client.Subjects(), queue.Pair{Queue: "gq", Tenant: "busy"},
		0, time.Time{}, queue.ConsumerOptions{}); err != nil {
		t.Fatal(err)
	}
	f.submitAs(busy, "", body)
	testenv.WaitFor(t, 5*time.Second, "the snapshot to show busy's job", func() bool {
		l, err := f.gw.TenantLoads(t.Context())
		return err == nil && l["busy"].Queued == 1
	})
	// hoarder may keep 1 byte: any request passes it once its usage is read.
	hoarder := f.addKey("hoarder", tenant.Policy{MaxKeptBytes: 1})
	testenv.WaitFor(t, 10*time.Second, "the worker answers hoarder's usage", func() bool {
		_, err := insp.TenantUsage(t.Context(), "hoarder")
		return err == nil
	})

	apis := []struct {
		name, path, body string
		// refusal says whether body is the API's envelope of a refusal of the given status whose
		// native reason is reason; dify names a refusal in message.
		refusal func(b []byte, status int, reason, dify string) bool
	}{
		{"native", "/v1/jobs?wait=true", body, func(b []byte, _ int, reason, _ string) bool {
			var e struct{ Reason, Detail string }
			return json.Unmarshal(b, &e) == nil && e.Reason == reason && e.Detail != ""
		}},
		{"dify", "/v1/sandbox/run", `{"language":"python3","code":"print(1)","preload":"","enable_network":false}`, func(b []byte, status int, _, dify string) bool {
			var e struct {
				Code    int
				Message string
				Data    any
			}
			return json.Unmarshal(b, &e) == nil && e.Code == -status && strings.HasPrefix(e.Message, dify) && e.Data == nil
		}},
		{"piston", "/api/v2/execute", `{"language":"python3","version":"*","files":[{"content":"print(1)"}]}`, func(b []byte, _ int, reason, _ string) bool {
			var e struct{ Message string }
			return json.Unmarshal(b, &e) == nil && strings.HasPrefix(e.Message, reason+": ")
		}},
		{"judge0", "/submissions?wait=true", `{"language_id":71,"source_code":"print(1)"}`, func(b []byte, _ int, reason, _ string) bool {
			var e struct{ Error string }
			return json.Unmarshal(b, &e) == nil && strings.HasPrefix(e.Error, reason+": ")
		}},
	}
	tests := []struct {
		name, tenant, key string
		hold              bool // a request holds the gateway's one waiting place
		status            int
		reason            string
		retryAfter        string
		native            string // besides the reason, in the native body
		dify              string // how dify's message starts
	}{
		{name: "unknown queue", tenant: "stranger", key: f.addKey("stranger", tenant.Policy{}),
			status: http.StatusNotFound, reason: "unknown_queue", dify: "unknown_queue: "},
		{name: "storage full", tenant: "hoarder", key: hoarder,
			status: http.StatusTooManyRequests, reason: "tenant_storage_full", retryAfter: "60", native: `"bound":"max_kept_bytes"`, dify: "tenant_storage_full: "},
		{name: "tenant queue full", tenant: "busy", key: busy,
			status: http.StatusTooManyRequests, reason: "tenant_queue_full", retryAfter: "1", native: `"max_queued":1`, dify: "tenant_queue_full: "},
		{name: "gateway admission full", tenant: "patient", key: f.addKey("patient", tenant.Policy{}), hold: true,
			status: http.StatusServiceUnavailable, reason: "too_many_waiting", retryAfter: "1", dify: "Too many requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.hold {
				conns := holdWaiting(t, strings.TrimPrefix(f.srv.URL, "http://"), 1)
				defer conns[0].Close()
				testenv.WaitFor(t, 30*time.Second, "the waiting place held", func() bool { return f.gw.Metrics().Waiting() == 1 })
			}
			stored := f.storedJobs()
			for _, api := range apis {
				resp := f.send(t.Context(), "POST", api.path, tt.key, []byte(api.body), "Content-Type", "application/json")
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("%s: read the answer: %v", api.name, err)
				}
				got := resp.Header.Get("Retry-After")
				if resp.StatusCode != tt.status || got != tt.retryAfter || !api.refusal(b, tt.status, tt.reason, tt.dify) ||
					(api.name == "native" && !strings.Contains(string(b), tt.native)) {
					t.Errorf("%s: POST %s = %d %s (Retry-After %q), want %d %s in its envelope (Retry-After %q)",
						api.name, api.path, resp.StatusCode, b, got, tt.status, tt.reason, tt.retryAfter)
				}
			}
			if got := f.storedJobs(); got != stored {
				t.Errorf("the jobs stream holds %d messages after the refusals, %d before: want nothing stored", got, stored)
			}
			want := fmt.Sprintf(`runfleet_gateway_tenant_jobs_refused_total{reason=%q,tenant=%q} %d`, tt.reason, tt.tenant, len(apis))
			if code, b := f.do("GET", "/metrics", apiKey, nil); code != http.StatusOK || !strings.Contains(string(b), want) {
				t.Errorf("metrics lack %s", want)
			}
		})
	}
}

// TestLookupOnlyForCallersIDs: a job whose id the gateway made is stored without the duplicate
// lookup (a direct get) every id of the caller's own costs; the caller's id still is looked up,
// and its second submit is a duplicate, stored once.
func TestLookupOnlyForCallersIDs(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	watch := f.nats.Conn()
	gets, err := watch.SubscribeSync("$JS.API.DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	lookups := func() int {
		if err := f.gwConn.Flush(); err != nil { // the gateway's requests have reached the server
			t.Fatal(err)
		}
		if err := watch.Flush(); err != nil { // and the server has sent them on to watch
			t.Fatal(err)
		}
		n, _, err := gets.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if code, ans := f.post("", `{"language":"python3","code":"print(1)"}`); code != http.StatusAccepted {
		t.Fatalf("POST without an id = %d %v, want 202", code, ans)
	}
	if n := lookups(); n != 0 {
		t.Errorf("a job with an id the gateway made cost %d direct gets, want none", n)
	}
	body := `{"id":"mine-1","language":"python3","code":"print(1)"}`
	if code, ans := f.post("", body); code != http.StatusAccepted {
		t.Fatalf("POST with an id = %d %v, want 202", code, ans)
	}
	if n := lookups(); n == 0 {
		t.Error("a job with the caller's id was not looked up")
	}
	if code, ans := f.post("", body); code != http.StatusAccepted || ans["job_id"] != "mine-1" {
		t.Errorf("POST of the same id again = %d %v, want 202 naming it", code, ans)
	}
	if n := f.storedJobs(); n != 2 {
		t.Errorf("the jobs stream holds %d requests, want 2: the second submit of mine-1 is a duplicate", n)
	}
}
