package webui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/job"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent = "00-" + traceID + "-00f067aa0ba902b7-01"
)

// TestTraceOf: only one strictly valid traceparent of version 00 names a trace; anything else a
// publisher may put in the header shows nothing.
func TestTraceOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   string // the trace id; "" for none
	}{
		{"valid", []string{traceparent}, traceID},
		{"flags 00", []string{"00-" + traceID + "-00f067aa0ba902b7-00"}, traceID},
		{"no header", nil, ""},
		{"empty", []string{""}, ""},
		{"two values", []string{traceparent, traceparent}, ""},
		{"not hex", []string{"00-zz" + traceID[2:] + "-00f067aa0ba902b7-01"}, ""},
		{"upper case", []string{"00-" + strings.ToUpper(traceID) + "-00f067aa0ba902b7-01"}, ""},
		{"all-zero trace id", []string{"00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01"}, ""},
		{"all-zero parent id", []string{"00-" + traceID + "-0000000000000000-01"}, ""},
		{"version 01", []string{"01-" + traceID + "-00f067aa0ba902b7-01"}, ""},
		{"version ff", []string{"ff-" + traceID + "-00f067aa0ba902b7-01"}, ""},
		{"a field more", []string{traceparent + "-00"}, ""},
		{"short trace id", []string{"00-" + traceID[1:] + "-00f067aa0ba902b7-01"}, ""},
		{"flags not hex", []string{"00-" + traceID + "-00f067aa0ba902b7-0x"}, ""},
		{"spaces", []string{" " + traceparent[1:]}, ""},
		{"markup", []string{`00-<script>alert(1)</script>aaaaaaaaaaaaaaaaaaa-00f067aa0ba902b7-01`}, ""},
		{"markup of the right length", []string{"00-" + `"><script>x</script>` + traceID[20:] + "-00f067aa0ba902b7-01"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{}
			for _, v := range tc.values {
				h.Add(job.HeaderTraceparent, v)
			}
			l, ok := traceOf(h, "http://jaeger:16686/trace/{trace_id}")
			if got := l.ID; got != tc.want || ok != (tc.want != "") {
				t.Errorf("traceOf(%q) = %q, %v; want %q", tc.values, got, ok, tc.want)
			}
			if ok && l.URL != "http://jaeger:16686/trace/"+traceID {
				t.Errorf("traceOf(%q) URL = %q, want jaeger's page of %s", tc.values, l.URL, traceID)
			}
		})
	}
	if l, ok := traceOf(nats.Header{job.HeaderTraceparent: {traceparent}}, ""); !ok || l.ID != traceID || l.URL != "" {
		t.Errorf("traceOf without a template = %+v, %v; want the id and no URL", l, ok)
	}
}

func TestCheckTraceURL(t *testing.T) {
	for _, tc := range []struct {
		template string
		ok       bool
	}{
		{"http://jaeger:16686/trace/{trace_id}", true},
		{"https://tempo.example/trace/{trace_id}?x=1", true},
		{`https://grafana.example/explore?left={"datasource":"tempo","queries":[{"query":"{trace_id}"}]}`, true},
		{"HTTPS://jaeger.example/trace/{trace_id}", true},
		{"http://jaeger:16686/trace/", false},
		{"http://jaeger:16686/trace/{traceid}", false},
		{"javascript:alert('{trace_id}')", false},
		{"ftp://jaeger/{trace_id}", false},
		{"/trace/{trace_id}", false},
		{"http:///trace/{trace_id}", false},
		{"http://jae ger/{trace_id}", false},
		{"", false},
	} {
		if err := CheckTraceURL(tc.template); (err == nil) != tc.ok {
			t.Errorf("CheckTraceURL(%q) = %v, want ok %v", tc.template, err, tc.ok)
		}
	}
}

// TestJobPageTrace renders the job page as the handler does: the trace as a link to the viewer's
// page with a template, as text without one, nothing without a valid traceparent; the operator's
// template goes through html/template's URL escaping.
func TestJobPageTrace(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	u := &UI{pages: pages}
	page := func(h nats.Header, template string) string {
		t.Helper()
		data := map[string]any{"ID": "j1", "Tenant": job.DefaultTenant, "Timeline": timelineOf(nil, nil)}
		if l, ok := traceOf(h, template); ok {
			data["Trace"] = l
		}
		w := httptest.NewRecorder()
		u.render(w, httptest.NewRequest("GET", "/ui/jobs/j1", nil), http.StatusOK, "job", data)
		if w.Code != http.StatusOK {
			t.Fatalf("render = %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	valid := nats.Header{job.HeaderTraceparent: {traceparent}}
	for _, tc := range []struct {
		name     string
		h        nats.Header
		template string
		want     []string
		wantNot  []string
	}{
		{"link", valid, "http://jaeger:16686/trace/{trace_id}",
			[]string{`<a id="trace" href="http://jaeger:16686/trace/` + traceID + `" target="_blank" rel="noopener"><code>` + traceID + `</code></a>`}, nil},
		{"link into a JSON query", valid, `https://grafana.example/explore?left={"queries":[{"query":"{trace_id}"}]}`,
			[]string{`href="https://grafana.example/explore?left=%7b%22queries%22:[%7b%22query%22:%22` + traceID + `%22%7d]%7d"`}, nil},
		{"text", valid, "", []string{`<code id="trace" class="trace-id">` + traceID + `</code>`}, []string{`<a id="trace"`}},
		{"none", nats.Header{job.HeaderTraceparent: {"00-<script>alert(1)</script>"}}, "http://jaeger:16686/trace/{trace_id}",
			nil, []string{`id="trace"`, "<script>alert", "jaeger"}},
		{"no header", nil, "http://jaeger:16686/trace/{trace_id}", nil, []string{`id="trace"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := page(tc.h, tc.template)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("job page lacks %s:\n%s", w, body)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(body, w) {
					t.Errorf("job page shows %s:\n%s", w, body)
				}
			}
		})
	}
}
