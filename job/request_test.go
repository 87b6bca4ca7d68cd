package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/job/jobtest"
)

func policy() job.Policy {
	p := job.DefaultPolicy()
	p.Languages = func(l string) bool { return l == "python3" || l == "nodejs" }
	return p
}

func TestDecodeRejects(t *testing.T) {
	p := policy()
	for _, c := range jobtest.BadInputs(p.MaxBodyBytes) {
		t.Run(c.Name, func(t *testing.T) {
			_, _, err := job.Decode([]byte(c.Body), c.ID, p)
			var re *job.RejectError
			if !errors.As(err, &re) {
				t.Fatalf("Decode() error = %v, want a RejectError", err)
			}
			if re.Reason != c.Reason {
				t.Errorf("Decode() reason = %s (%s), want %s", re.Reason, re.Detail, c.Reason)
			}
		})
	}
	for _, c := range jobtest.UnreadableIDs {
		t.Run(c.Name, func(t *testing.T) {
			_, _, err := job.Decode([]byte(`{"language":"python3","code":"x"}`), c.ID, p)
			var re *job.RejectError
			if !errors.As(err, &re) || re.Reason != job.ReasonInvalidID {
				t.Errorf("Decode() error = %v, want invalid_id", err)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	p := policy()
	cases := []struct {
		name, body string
		check      func(t *testing.T, r job.Request, b job.Bounds)
	}{
		{"minimal takes defaults", `{"language":"python3","code":"print(1)"}`, func(t *testing.T, r job.Request, b job.Bounds) {
			want := p.Default
			want.MaxPages = job.PagesNeeded(want.Timeout, want.OutputBytes, want.PageBytes)
			if b != want || r.ID != "ok-1" {
				t.Errorf("bounds = %+v id %q, want %+v and the message id", b, r.ID, want)
			}
		}},
		{"limits at the maximum", `{"language":"nodejs","code":"x","limits":{"timeout_ms":300000,"pids":512}}`, func(t *testing.T, r job.Request, b job.Bounds) {
			if b.Timeout != p.Max.Timeout || b.Pids != 512 {
				t.Errorf("bounds = %+v", b)
			}
		}},
		{"limits at the minimum", `{"language":"python3","code":"x","limits":{"memory_bytes":16777216,"pids":8}}`, nil},
		{"labels at their bounds", `{"language":"python3","code":"x","labels":{` + sixteenLabels() + `}}`, func(t *testing.T, r job.Request, _ job.Bounds) {
			if len(r.Labels) != job.MaxLabels {
				t.Errorf("labels = %d, want %d", len(r.Labels), job.MaxLabels)
			}
		}},
		{"max_pages derived from a long timeout", `{"language":"python3","code":"x","limits":{"timeout_ms":300000}}`, func(t *testing.T, _ job.Request, b job.Bounds) {
			// A line every 100 ms for 5 minutes must fit: at most one time-cut page per PageInterval.
			if lines := int64(300 * 10); b.MaxPages < lines*int64(100*time.Millisecond)/int64(job.PageInterval) {
				t.Errorf("MaxPages = %d for a 5-minute job, too few for a line every 100 ms", b.MaxPages)
			}
		}},
		{"body at the limit", `{"language":"python3","code":"x","stdin":"` + strings.Repeat("a", p.MaxBodyBytes-48) + `"}`, nil},
		{"everything", `{"id":"ok-1","language":"python3","code":"x","preload":"y","stdin":"z","env":{"A_1":"v"},` +
			`"files":[{"path":"d/in.csv","content":"aGk=","mode":420}],"deadline":"2030-01-01T00:00:00Z","labels":{"t":"a"}}`,
			func(t *testing.T, r job.Request, _ job.Bounds) {
				if string(r.Files[0].Content) != "hi" || r.Env["A_1"] != "v" || r.Deadline.Year() != 2030 {
					t.Errorf("request = %+v", r)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.body) > p.MaxBodyBytes {
				t.Fatalf("test body is %d bytes, over the limit", len(c.body))
			}
			r, b, err := job.Decode([]byte(c.body), "ok-1", p)
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if c.check != nil {
				c.check(t, r, b)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	p := policy()
	for _, c := range jobtest.BadInputs(1 << 16) {
		f.Add([]byte(c.Body), c.ID)
	}
	f.Add([]byte(`{"language":"python3","code":"print(1)"}`), "seed")
	f.Fuzz(func(t *testing.T, body []byte, id string) {
		r, _, err := job.Decode(body, id, p)
		if err != nil {
			var re *job.RejectError
			if !errors.As(err, &re) || re.Reason == "" {
				t.Fatalf("Decode() error = %v, want a RejectError with a reason", err)
			}
			return
		}
		if r.ID != id || !job.ValidID(r.ID) || r.Code == "" || !p.Languages(r.Language) {
			t.Fatalf("Decode() accepted %+v", r)
		}
	})
}

func sixteenLabels() string {
	parts := make([]string, job.MaxLabels)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"label.%02d_x-y":%q`, i, strings.Repeat("v", job.MaxLabelValueBytes))
	}
	return strings.Join(parts, ",")
}

func TestClipDetail(t *testing.T) {
	long := strings.Repeat("é", job.MaxDetailBytes)
	got := job.ClipDetail(long)
	if len(got) > job.MaxDetailBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("ClipDetail() = %d bytes, valid UTF-8 %v; want at most %d, valid, marked cut", len(got), utf8.ValidString(got), job.MaxDetailBytes)
	}
	if short := "short"; job.ClipDetail(short) != short {
		t.Errorf("ClipDetail(%q) = %q, want it unchanged", short, job.ClipDetail(short))
	}
}

func TestMatchOutput(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"out/*.png", "out/plot.png", true},
		{"out/*.png", "out/sub/plot.png", false},
		{"out/**/*.png", "out/plot.png", true},
		{"out/**/*.png", "out/a/b/plot.png", true},
		{"**", "a/b/c", true},
		{"**/*.csv", "report.csv", true},
		{"report.csv", "report.csv", true},
		{"./report.csv", "report.csv", true},
		{"report.csv", "report.csvx", false},
		{"r?port.[cx]sv", "report.csv", true},
		{"out/**", "outx/a", false},
	}
	for _, c := range cases {
		if got := job.MatchOutput(c.pattern, c.name); got != c.want {
			t.Errorf("MatchOutput(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestOutputsAccepted(t *testing.T) {
	body := `{"language":"python3","code":"x","outputs":["out/**/*.png","report.csv"],"limits":{"artifact_bytes":1024,"artifact_files":2}}`
	p := job.DefaultPolicy()
	req, b, err := job.Decode([]byte(body), "ok-1", p)
	if err != nil {
		t.Fatalf("Decode() error = %v", err)
	}
	if len(req.Outputs) != 2 || b.ArtifactBytes != 1024 || b.ArtifactFiles != 2 {
		t.Errorf("Decode() = outputs %q, bounds %+v; want 2 patterns, 1024 bytes, 2 files", req.Outputs, b)
	}
	if _, b, _ := job.Decode([]byte(`{"language":"python3","code":"x"}`), "ok-2", p); b.ArtifactBytes != 16<<20 || b.ArtifactFiles != 32 {
		t.Errorf("default bounds = %+v, want 16 MiB and 32 files", b)
	}
}

func TestSettlementArtifactsJSON(t *testing.T) {
	for _, c := range []struct {
		arts []job.Artifact
		want string
	}{{nil, ""}, {[]job.Artifact{}, `"artifacts":[]`}} {
		b, err := json.Marshal(job.Settlement{Artifacts: c.arts})
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"artifacts"`); has != (c.want != "") || !strings.Contains(string(b), c.want) {
			t.Errorf("Marshal(artifacts %#v) = %s, want %q", c.arts, b, c.want)
		}
	}
}
