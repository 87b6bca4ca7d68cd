package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// TestTenantAttacks runs issue 37's attacks 1 to 3 with two tenants on the real stack (gateway,
// worker, NATS, Redis): alpha reuses, races and forges bravo's ids, through the gateway and over
// NATS. Each fails for alpha: bravo's jobs run once, and only bravo and the operator read them.
func TestTenantAttacks(t *testing.T) {
	f := newFleet(t, gateway.Options{MaxWait: 30 * time.Second})
	f.startWorker()
	alpha := f.addKey("alpha", tenant.Policy{})
	bravo := f.addKey("bravo", tenant.Policy{})
	// The parking queues are declared (an undeclared one would refuse alpha before any id is
	// compared), and no worker serves them, so that alpha's copies stay stored.
	f.declare(map[string]protocol.QueueDeclaration{"idle": {}, "nobody-serves": {}, "parking": {}, "parking2": {}})

	// Attack 1: alpha takes an id bravo used, on a queue no worker serves, inside the duplicate
	// window (right after bravo's publish) and past it (once bravo's job settled).
	const report = `{"id":"bravo-report-7","language":"python3","code":"open('report.csv','w').write('bravo-secret'); print('bravo output')","outputs":["report.csv"]}`
	const parked = `{"id":"bravo-report-7","language":"python3","code":"print('alpha output')"}`
	if got := f.submitAs(bravo, "", report); got != "bravo-report-7" {
		t.Fatalf("bravo's job id = %q", got)
	}
	if got := f.submitAs(alpha, "?queue=parking", parked); got != "bravo-report-7" {
		t.Fatalf("alpha's job id = %q", got)
	}
	if st := f.settleOf("bravo", "bravo-report-7"); st.Status != job.StatusSucceeded || len(st.Artifacts) != 1 {
		t.Fatalf("bravo's job settled %+v, want succeeded with its report", st)
	}
	if code, b := f.do("POST", "/v1/jobs?queue=parking2", alpha, []byte(parked)); code != http.StatusAccepted {
		t.Errorf("alpha's id again on a third queue = %d %s, want 202, a duplicate of its own", code, b)
	}
	f.mustNotLeak(t, alpha, "bravo-report-7", "bravo", "bravo-secret")
	if code, b := f.do("GET", "/v1/jobs/bravo-report-7", alpha, nil); code != http.StatusNotFound || !strings.Contains(string(b), "not_settled") {
		t.Errorf("alpha's GET of its parked job = %d %s, want 404 not_settled", code, b)
	}
	if code, b := f.do("GET", "/v1/jobs/bravo-report-7?request=true", alpha, nil); code != http.StatusOK || !strings.Contains(string(b), "alpha output") || !strings.Contains(string(b), `"tenant":"alpha"`) {
		t.Errorf("alpha's inspection = %d %s, want its own request", code, b)
	}
	// bravo still reads its own job, and its file.
	if code, b := f.do("GET", "/v1/jobs/bravo-report-7", bravo, nil); code != http.StatusOK || !strings.Contains(string(b), `"status":"succeeded"`) {
		t.Errorf("bravo's GET of its job = %d %s, want its settlement", code, b)
	}
	if code, b := f.do("GET", "/v1/jobs/bravo-report-7/artifacts/report.csv", bravo, nil); code != http.StatusOK || string(b) != "bravo-secret" {
		t.Errorf("bravo's artifact = %d %q", code, b)
	}
	// The operator sees both, and names which.
	code, b := f.do("GET", "/v1/jobs/bravo-report-7", apiKey, nil)
	var amb struct {
		Reason  string   `json:"reason"`
		Tenants []string `json:"tenants"`
	}
	if json.Unmarshal(b, &amb); code != http.StatusConflict || amb.Reason != "ambiguous_id" || !slices.Equal(amb.Tenants, []string{"alpha", "bravo"}) {
		t.Errorf("operator's GET of an id two tenants hold = %d %s, want 409 ambiguous_id [alpha bravo]", code, b)
	}
	if code, b := f.do("GET", "/v1/jobs/bravo-report-7?request=true&tenant=bravo", apiKey, nil); code != http.StatusOK || !strings.Contains(string(b), "bravo-secret") || !strings.Contains(string(b), `"status":"succeeded"`) {
		t.Errorf("operator's inspection of bravo's job = %d %s", code, b)
	}
	// The web view: alpha's session shows its own parked job, never bravo's.
	c := f.browser()
	base := f.srv.URL + "/ui/"
	if resp := login(t, c, base, alpha); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("web view login with alpha's key = %d", resp.StatusCode)
	}
	if code, page := get(t, c, base+"jobs/bravo-report-7"); code != http.StatusOK || strings.Contains(page, "bravo output") || strings.Contains(page, "bravo-secret") {
		t.Errorf("web view: alpha's page of the id = %d, shows bravo's job:\n%s", code, page)
	}
	if code, _ := get(t, c, base+"jobs/bravo-report-7?tenant=bravo"); code != http.StatusNotFound {
		t.Errorf("web view: alpha naming bravo's tenant = %d, want 404", code)
	}
	if code, _ := get(t, c, base+"jobs/bravo-report-7/artifacts/report.csv"); code == http.StatusOK {
		t.Errorf("web view: alpha's session read bravo's artifact (%d)", code)
	}

	// Attack 2: alpha posts the id of bravo's running job with wait=true and
	// cancel_on_disconnect=true, and hangs up; and the id of bravo's settled job with wait=true.
	const long = `{"id":"bravo-long-1","language":"python3","code":"import time; print('bravo start', flush=True); time.sleep(3); print('bravo done')"}`
	f.submitAs(bravo, "", long)
	ctx, hangUp := context.WithCancel(t.Context())
	resp := make(chan *http.Response, 1)
	go func() {
		r, err := f.srv.Client().Do(f.request(ctx, "POST", "/v1/jobs?wait=true&cancel_on_disconnect=true", alpha,
			`{"id":"bravo-long-1","language":"python3","code":"import time; time.sleep(30)"}`))
		if err == nil {
			resp <- r
		}
		close(resp)
	}()
	testenv.WaitFor(t, 30*time.Second, "alpha's job of the id stored", func() bool {
		_, err := f.as("alpha").Lookup(t.Context(), "bravo-long-1")
		return err == nil
	})
	hangUp()
	if r, ok := <-resp; ok {
		r.Body.Close()
	}
	if st := f.settleOf("bravo", "bravo-long-1"); st.Status != job.StatusSucceeded || st.StdoutBytes != int64(len("bravo start\nbravo done\n")) {
		t.Errorf("bravo's job after alpha hung up on its id = %s/%s (%d bytes), want succeeded with its output", st.Status, st.Reason, st.StdoutBytes)
	}
	if st := f.settleOf("alpha", "bravo-long-1"); st.Status != job.StatusCancelled {
		t.Errorf("alpha's own job of the id = %s, want cancelled by its hang-up", st.Status)
	}
	code, b = f.do("POST", "/v1/jobs?wait=true", alpha, []byte(`{"id":"bravo-report-9","language":"python3","code":"print('alpha nine!')"}`))
	f.submitAs(bravo, "", `{"id":"bravo-report-9","language":"python3","code":"print('bravo nine')"}`)
	var own job.Settlement
	if json.Unmarshal(b, &own); code != http.StatusOK || own.StdoutBytes != int64(len("alpha nine!\n")) {
		t.Errorf("alpha's wait on an id = %d %s, want its own settlement", code, b)
	}
	if st := f.settleOf("bravo", "bravo-report-9"); st.Status != job.StatusSucceeded || st.StdoutBytes != int64(len("bravo nine\n")) {
		t.Errorf("bravo's job of an id alpha used first = %+v", st)
	}

	// Attack 3: alpha submits bravo's next id first, with a forged total; bravo's own submit of it
	// runs bravo's code, once.
	code, b = f.do("POST", "/v1/jobs?wait=true", alpha, []byte(`{"id":"bravo-invoice-43","language":"python3","code":"print('total: 0 (forged)')"}`))
	if code != http.StatusOK {
		t.Fatalf("alpha's forged job = %d %s", code, b)
	}
	code, b = f.do("POST", "/v1/jobs?wait=true", bravo, []byte(`{"id":"bravo-invoice-43","language":"python3","code":"print('total: 4300')"}`))
	var st job.Settlement
	if json.Unmarshal(b, &st); code != http.StatusOK || st.Status != job.StatusSucceeded || st.StdoutBytes != int64(len("total: 4300\n")) {
		t.Errorf("bravo's job of the id alpha forged first = %d %s, want its own run", code, b)
	}
	f.ranOnce(t, "bravo", "bravo-invoice-43")

	// Over NATS: alpha publishes a job of its own whose Nats-Msg-Id is the id bravo is about to
	// use; bravo's submit, inside the window and past it, is stored and runs.
	nc := f.nats.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := f.client.Subjects()
	for i, id := range []string{"bravo-pay-99", "bravo-pay-100"} {
		m := nats.NewMsg(s.Job("default", "alpha", "junk-"+id))
		m.Header.Set(job.HeaderMsgID, id)
		m.Data = []byte(`{"language":"python3","code":"print('junk')"}`)
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatalf("alpha's poisoning publish: %v", err)
		}
		if i == 1 {
			time.Sleep(200 * time.Millisecond) // past the 100 ms window; no event marks its end
		}
		f.submitAs(bravo, "", `{"id":"`+id+`","language":"python3","code":"print('paid')"}`)
		if st := f.settleOf("bravo", id); st.Status != job.StatusSucceeded {
			t.Errorf("bravo's %s after alpha's header = %s/%s, want it stored and run", id, st.Status, st.Reason)
		}
		if code, b := f.do("GET", "/v1/jobs/"+id+"?tenant=bravo", apiKey, nil); code != http.StatusOK {
			t.Errorf("operator's GET of bravo's %s = %d %s", id, code, b)
		}
		f.ranOnce(t, "bravo", id)
	}
	// The poisoned messages themselves are refused (their header names another id) and removed.
	testenv.WaitFor(t, 30*time.Second, "alpha's poisoned jobs removed", func() bool {
		_, err1 := f.as("alpha").Lookup(t.Context(), "junk-bravo-pay-99")
		_, err2 := f.as("alpha").Lookup(t.Context(), "junk-bravo-pay-100")
		return err1 != nil && err2 != nil
	})
}

// mustNotLeak checks that key reaches nothing of tenant's job id by any route: no answer
// carries leak, the text only tenant's job holds.
func (f *fleet) mustNotLeak(t *testing.T, key, id, tenant, leak string) {
	t.Helper()
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/jobs/" + id},
		{"GET", "/v1/jobs/" + id + "?request=true"},
		{"GET", "/v1/jobs/" + id + "/events"},
		{"GET", "/v1/jobs/" + id + "/artifacts/report.csv"},
		{"GET", "/v1/jobs/" + id + "?tenant=" + tenant},
		{"GET", "/v1/jobs/" + id + "/artifacts/report.csv?tenant=" + tenant},
		{"GET", "/v1/jobs?status=succeeded"},
		{"POST", "/v1/jobs/" + id + "/redrive"},
	} {
		code, body := f.answer(rt.method, rt.path, key, "\x00", nil) // nothing replaced
		if strings.Contains(body, leak) || strings.Contains(body, "bravo output") {
			t.Errorf("%s %s with another tenant's key = %d %s: leaks %s's job", rt.method, rt.path, code, body, tenant)
		}
	}
}

// ranOnce checks that tenant's job id passed the dispatch gate once and settled once.
func (f *fleet) ranOnce(t *testing.T, tenant, id string) {
	t.Helper()
	s := f.client.Subjects()
	st, err := f.js.Stream(t.Context(), s.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{s.Dispatched(tenant, id), s.Settled(tenant, id)} {
		info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject))
		if err != nil || info.State.Subjects[subject] != 1 {
			t.Errorf("%s: %v messages (%v), want 1", subject, info.State.Subjects[subject], err)
		}
	}
}

// request is a request with key, for a caller that sends it itself.
func (f *fleet) request(ctx context.Context, method, path, key, body string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, io.NopCloser(strings.NewReader(body)))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	return req
}
