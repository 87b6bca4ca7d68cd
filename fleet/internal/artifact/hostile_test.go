package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/artifact"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// A name that is not UTF-8 cannot be listed in a JSON settlement as itself: such files are
// skipped, the collection says truncated, and every listed object opens byte-exact.
func TestCollectSkipsNamesNotUTF8(t *testing.T) {
	_, store, _ := newBucket(t)
	ws := newWorkspace(t, map[string][]byte{
		"out/bad\xff.txt": []byte("one"),
		"out/bad\xfe.txt": []byte("two"), // JSON would list both as "out/bad\uFFFD.txt"
		"out/\xc3/ok.txt": []byte("under a bad directory"),
		"out/ok.txt":      []byte("kept"),
	})
	res, err := artifact.Collect(t.Context(), ws, store, artifact.Job{Tenant: "t", ID: "utf8", Attempt: 1, Outputs: []string{"out/**"},
		MaxBytes: 1 << 20, MaxFiles: 8, Valid: always})
	if err != nil || !res.Truncated || len(res.Artifacts) != 1 || res.Artifacts[0].Path != "out/ok.txt" {
		t.Fatalf("Collect() = %+v, %v; want only out/ok.txt, truncated", res, err)
	}
	b, err := store.GetBytes(t.Context(), res.Artifacts[0].Object)
	if err != nil || string(b) != "kept" {
		t.Errorf("GetBytes(%q) = %q, %v; want %q", res.Artifacts[0].Object, b, err, "kept")
	}
	if got, want := testenv.ObjectNames(t, store), []string{"t/utf8/1", "t/utf8/1/out/ok.txt"}; !slices.Equal(got, want) {
		t.Errorf("objects = %q, want %q", got, want)
	}
}

// A workspace a job shaped to be walked for long: each case ends in time, keeps what comes
// before the bound in path order, and says truncated where a bound cut the walk.
func TestCollectHostileWorkspace(t *testing.T) {
	_, store, _ := newBucket(t)
	deep := t.TempDir()
	// 24 levels for the pattern that took 29 s, then deeper than any walk goes.
	p := deep
	for i := range 70 {
		p = filepath.Join(p, "a")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if i == 23 {
			if err := os.WriteFile(filepath.Join(p, "0.txt"), []byte("24 deep"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(deep, "0.txt"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		outputs   []string
		want      []string
		truncated bool
	}{
		{"exponential pattern", []string{strings.Repeat("**/", 12) + "x"}, nil, true},
		{"every file before the depth bound", []string{"**"}, []string{"0.txt", strings.Repeat("a/", 24) + "0.txt"}, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			res, err := artifact.Collect(ctx, workspace(deep), store, artifact.Job{Tenant: "t", ID: "deep", Attempt: int64(i + 1), Outputs: c.outputs,
				MaxBytes: 1 << 20, MaxFiles: 8, Valid: always})
			var got []string
			for _, a := range res.Artifacts {
				got = append(got, a.Path)
			}
			if err != nil || !slices.Equal(got, c.want) || res.Truncated != c.truncated {
				t.Errorf("Collect() = %q truncated %v, %v; want %q truncated %v", got, res.Truncated, err, c.want, c.truncated)
			}
		})
	}
}
