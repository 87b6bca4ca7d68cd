package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/job"
)

// TestWebViewTraceLink: a job's page shows the trace its request carried, from a traceparent sent
// to the gateway or published over NATS; as text on a gateway without --trace-url, as a link to
// the viewer on the binary started with one. A forged traceparent shows nothing, and a tenant
// sees the trace of its own jobs only. No worker: the jobs wait on a queue nobody serves.
func TestWebViewTraceLink(t *testing.T) {
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		tp      = "00-" + traceID + "-00f067aa0ba902b7-01"
		viewer  = "http://jaeger.example:16686/trace/"
	)
	f := newFleet(t, gateway.Options{})
	alpha := f.addKey("alpha", tenant.Policy{})
	bravo := f.addKey("bravo", tenant.Policy{})
	submit := func(id string, hdr ...string) {
		t.Helper()
		body := `{"id":"` + id + `","language":"python3","code":"print(1)"}`
		if code, b := f.do("POST", "/v1/jobs?queue=nobody-serves", alpha, []byte(body), hdr...); code != http.StatusAccepted {
			t.Fatalf("POST %s = %d %s, want 202", id, code, b)
		}
	}
	submit("traced", "traceparent", tp)
	submit("untraced")
	submit("forged-at-the-gateway", "traceparent", "00-zz"+traceID[2:]+"-00f067aa0ba902b7-01")
	// A publisher on NATS writes the header as it likes; the stored request keeps it as written.
	forged := map[string]string{
		"not-hex":      "00-zz" + traceID[2:] + "-00f067aa0ba902b7-01",
		"zero-trace":   "00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01",
		"zero-parent":  "00-" + traceID + "-0000000000000000-01",
		"version-ff":   "ff-" + traceID + "-00f067aa0ba902b7-01",
		"markup":       `00-"><script>alert(1)</script>` + traceID[20:] + "-00f067aa0ba902b7-01",
		"upper-case":   "00-" + strings.ToUpper(traceID) + "-00f067aa0ba902b7-01",
		"longer":       tp + "-00",
		"published-ok": tp,
	}
	for id, v := range forged {
		_, err := f.as("alpha").Submit(t.Context(), "nobody-serves", job.Request{ID: id, Language: "python3", Code: "print(1)"},
			&runfleet.SubmitOptions{Header: nats.Header{job.HeaderTraceparent: {v}}})
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
	}

	// The in-process gateway has no --trace-url: the id as text, and no link.
	c := f.browser()
	base := f.srv.URL + "/ui/"
	if resp := login(t, c, base, alpha); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login as alpha = %d", resp.StatusCode)
	}
	text := `<code id="trace" class="trace-id">` + traceID + `</code>`
	for _, id := range []string{"traced", "published-ok"} {
		if code, page := get(t, c, base+"jobs/"+id); code != http.StatusOK || !strings.Contains(page, text) || strings.Contains(page, "<a id=\"trace\"") {
			t.Errorf("alpha's page of %s = %d, want the trace id as text and no link:\n%s", id, code, page)
		}
	}
	for _, id := range []string{"untraced", "forged-at-the-gateway", "not-hex", "zero-trace", "zero-parent", "version-ff", "markup", "upper-case", "longer"} {
		code, page := get(t, c, base+"jobs/"+id)
		if code != http.StatusOK || strings.Contains(page, `id="trace"`) || strings.Contains(page, "<script>alert") {
			t.Errorf("alpha's page of %s = %d, want no trace:\n%s", id, code, page)
		}
	}
	// bravo's session: the id names bravo's own job, which does not exist, and alpha's is out of
	// reach; nothing of alpha's trace shows either way.
	cb := f.browser()
	if resp := login(t, cb, base, bravo); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login as bravo = %d", resp.StatusCode)
	}
	for _, path := range []string{"jobs/traced", "jobs/traced?tenant=alpha"} {
		if code, page := get(t, cb, base+path); code == http.StatusOK || strings.Contains(page, traceID) {
			t.Errorf("bravo's %s = %d, want no page and no trace of alpha's job:\n%s", path, code, page)
		}
	}

	// The gateway binary with --trace-url links it, for the operator naming the tenant.
	p := f.startBinary("--trace-url", viewer+"{trace_id}")
	co := f.browser()
	if resp := login(t, co, p.URL+"/ui/", apiKey); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("operator's login on the binary = %d", resp.StatusCode)
	}
	link := `<a id="trace" href="` + viewer + traceID + `" target="_blank" rel="noopener"><code>` + traceID + `</code></a>`
	if code, page := get(t, co, p.URL+"/ui/jobs/traced?tenant=alpha"); code != http.StatusOK || !strings.Contains(page, link) {
		t.Errorf("operator's page of alpha's traced job = %d, want %s:\n%s", code, link, page)
	}
	if code, page := get(t, co, p.URL+"/ui/jobs/markup?tenant=alpha"); code != http.StatusOK || strings.Contains(page, `id="trace"`) {
		t.Errorf("operator's page of a forged traceparent = %d, want no trace:\n%s", code, page)
	}
	if code, page := get(t, co, p.URL+"/ui/jobs/traced"); strings.Contains(page, traceID) {
		t.Errorf("operator's page of the default tenant's id traced = %d, shows alpha's trace:\n%s", code, page)
	}
}
