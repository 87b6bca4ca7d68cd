package job_test

import (
	"path"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/job"
)

// Patterns an untrusted request can send: each is matched against a deep path it almost matches.
// The first took 29 s when each "**" tried every split.
func TestMatchOutputHostile(t *testing.T) {
	deep := strings.Repeat("a/", 23) + "a" // 24 levels
	cases := []struct {
		name, pattern, path string
	}{
		{"twelve **", strings.Repeat("**/", 12) + "x", deep},
		{"many ** between elements", strings.Repeat("**/a/", 100) + "x", deep},
		{"stars in elements", strings.Repeat("*a*/**/", 80) + "x", deep},
		{"longest pattern", strings.Repeat("**/", 341) + "x", strings.Repeat("a/", 63) + "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.pattern) > 1024 {
				t.Fatalf("pattern of %d bytes: requests carry at most 1024", len(c.pattern))
			}
			done := make(chan bool, 1)
			go func() { done <- job.MatchOutput(c.pattern, c.path) }()
			select {
			case got := <-done:
				if got {
					t.Errorf("MatchOutput(%q, %q) = true, want false", c.pattern, c.path)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("MatchOutput(%q, %q) still running after 5 s", c.pattern, c.path)
			}
		})
	}
}

// slowMatch is the definition of MatchOutput, tried split by split: exponential, for checking
// small cases only.
func slowMatch(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if slowMatch(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], name[0])
	return ok && slowMatch(pat[1:], name[1:])
}

// FuzzMatchOutput checks that no pattern a request may carry makes one match take over 100 ms
// against a path a workspace walk can yield, and, where the definition can be tried split by
// split, that the answer is the definition's.
func FuzzMatchOutput(f *testing.F) {
	f.Add(strings.Repeat("**/", 12)+"x", strings.Repeat("a/", 23)+"a")
	f.Add("out/**/*.png", "out/a/b/plot.png")
	f.Add("**/**/b/**", "a/b/c")
	f.Add("r?port.[cx]sv", "report.csv")
	f.Add("*/**/*a*/**/x", "a/ba/x/a")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		// A request's pattern is at most 1024 bytes; a walk goes at most 64 directories deep,
		// and a name element is at most 255 bytes.
		if len(pattern) > 1024 || len(name) > 65*256 || pattern == "" || name == "" {
			return
		}
		start := time.Now()
		got := job.MatchOutput(pattern, name)
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("MatchOutput(%q, %q) took %v, want at most 100 ms", pattern, name, d)
		}
		pat, elems := strings.Split(path.Clean(pattern), "/"), strings.Split(name, "/")
		if strings.Count(pattern, "**") <= 4 && len(pat) <= 8 && len(elems) <= 8 {
			if want := slowMatch(pat, elems); got != want {
				t.Fatalf("MatchOutput(%q, %q) = %v, want %v", pattern, name, got, want)
			}
		}
	})
}
