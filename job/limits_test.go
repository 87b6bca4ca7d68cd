package job_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/runfleet/runfleet/job"
)

func TestLimitsWire(t *testing.T) {
	cases := []struct {
		name   string
		limits job.Limits
		wire   string
		back   job.Limits // what the wire form decodes to
	}{
		{"zero is absent", job.Limits{}, `{}`, job.Limits{}},
		{"every field", job.Limits{Timeout: 5 * time.Second, OutputBytes: 1, PageBytes: 2, MaxPages: 3, MemoryBytes: 256 << 20,
			Pids: 8, ArtifactBytes: 4, ArtifactFiles: 5},
			`{"timeout_ms":5000,"output_bytes":1,"page_bytes":2,"max_pages":3,"memory_bytes":268435456,"pids":8,"artifact_bytes":4,"artifact_files":5}`,
			job.Limits{Timeout: 5 * time.Second, OutputBytes: 1, PageBytes: 2, MaxPages: 3, MemoryBytes: 256 << 20,
				Pids: 8, ArtifactBytes: 4, ArtifactFiles: 5}},
		{"timeout rounds up to a millisecond", job.Limits{Timeout: 1500 * time.Microsecond}, `{"timeout_ms":2}`,
			job.Limits{Timeout: 2 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(c.limits)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.wire {
				t.Errorf("Marshal() = %s, want %s", got, c.wire)
			}
			var back job.Limits
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("Unmarshal(%s) error = %v", got, err)
			}
			if back != c.back {
				t.Errorf("Unmarshal(%s) = %+v, want %+v", got, back, c.back)
			}
		})
	}
}

func TestRequestOmitsZeroLimits(t *testing.T) {
	b, err := json.Marshal(job.Request{Language: "python3", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"language":"python3","code":"x"}`; string(b) != want {
		t.Errorf("Marshal() = %s, want %s", b, want)
	}
}

// A Go zero is the default, a Go negative is invalid, and both agree with what the worker decides
// about the wire form the client sends.
func TestValidateLimits(t *testing.T) {
	p := policy()
	cases := []struct {
		name   string
		limits job.Limits
		reject bool
		check  func(t *testing.T, b job.Bounds)
	}{
		{"zero takes every default", job.Limits{}, false, func(t *testing.T, b job.Bounds) {
			if b.Timeout != p.Default.Timeout || b.MemoryBytes != p.Default.MemoryBytes || b.Pids != p.Default.Pids {
				t.Errorf("bounds = %+v, want the defaults %+v", b, p.Default)
			}
		}},
		{"durations read naturally", job.Limits{Timeout: 5 * time.Second, MemoryBytes: 256 << 20}, false, func(t *testing.T, b job.Bounds) {
			if b.Timeout != 5*time.Second || b.MemoryBytes != 256<<20 {
				t.Errorf("bounds = %+v, want 5s and 256 MiB", b)
			}
		}},
		{"negative timeout", job.Limits{Timeout: -time.Second}, true, nil},
		{"negative sub-millisecond timeout", job.Limits{Timeout: -1}, true, nil},
		{"negative artifact bytes", job.Limits{ArtifactBytes: -1}, true, nil},
		{"above the maximum", job.Limits{Timeout: p.Max.Timeout + time.Millisecond}, true, nil},
		{"below the minimum", job.Limits{Pids: 2}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := job.Request{Language: "python3", Code: "x", Limits: c.limits}
			b, err := r.Validate(p)
			var re *job.RejectError
			if c.reject {
				if !errors.As(err, &re) || re.Reason != job.ReasonInvalidLimits {
					t.Errorf("Validate() error = %v, want invalid_limits", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() error = %v", err)
			}
			c.check(t, b)
			body, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			_, wb, err := job.Decode(body, "limits-1", p)
			if err != nil || wb != b {
				t.Errorf("Decode(%s) = %+v, %v; want %+v as Validate resolved", body, wb, err, b)
			}
		})
	}
}
