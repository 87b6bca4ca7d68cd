package webui

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/job"
)

func TestTimeline(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	ran := &job.Settlement{Status: job.StatusSucceeded, Attempt: 3, Worker: "w", QueuedAt: at,
		StartedAt: at.Add(time.Second), FinishedAt: at.Add(3 * time.Second), SettledAt: at.Add(4 * time.Second)}
	rejected := &job.Settlement{Status: job.StatusRejected, QueuedAt: at, SettledAt: at.Add(20 * time.Millisecond)}
	for _, tc := range []struct {
		name    string
		s       *job.Settlement
		missing string // the stages without a time
		after   string // each stage's time after the previous, as listed
		spans   string
	}{
		{"ran", ran, "claimed", "||1s|2s|1s", "waiting running settling"},
		{"rejected", rejected, "claimed started finished", "||||20ms", "waiting"},
		{"not settled", nil, "queued claimed started finished settled", "||||", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := timelineOf(tc.s, map[int64]bool{3: true, 1: true})
			var missing, after, spans []string
			for _, s := range tl.Stages {
				if s.Missing != "" {
					missing = append(missing, s.Name)
				}
				after = append(after, s.After)
			}
			for _, s := range tl.Bar {
				spans = append(spans, s.Name)
			}
			if got := strings.Join(missing, " "); got != tc.missing {
				t.Errorf("missing stages = %q, want %q", got, tc.missing)
			}
			if got := strings.Join(after, "|"); got != tc.after {
				t.Errorf("stages after the previous = %q, want %q", got, tc.after)
			}
			if got := strings.Join(spans, " "); got != tc.spans {
				t.Errorf("spans = %q, want %q", got, tc.spans)
			}
			if tl.Wrote != "1, 3" {
				t.Errorf("attempts that wrote = %q, want \"1, 3\"", tl.Wrote)
			}
		})
	}
	if got := timelineOf(rejected, nil).Stages[2].Missing; got != "did not start: rejected" {
		t.Errorf("a rejected job's start: %q", got)
	}
}

func TestSource(t *testing.T) {
	code := "print('</script><img src=x onerror=alert(1)>')\n"
	quoted, _ := json.Marshal(code)
	s, ok := sourceOf(`{"language":"python3","code":` + string(quoted) + `,"stdin":"x\n","limits":{"timeout_ms":5}}`)
	if !ok || s.Code != code || s.Stdin != "x\n" || s.Language != "python3" {
		t.Fatalf("sourceOf = %+v, %v", s, ok)
	}
	if strings.Contains(s.Rest, "code") || !strings.Contains(s.Rest, "timeout_ms") {
		t.Errorf("the other fields = %q, want the limits without the code", s.Rest)
	}
	if _, ok := sourceOf(`not json`); ok {
		t.Error("sourceOf(not json) ok, want the JSON shown as it is")
	}
}
