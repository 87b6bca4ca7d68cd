package runfleet

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/job"
)

// TestSaveAllConfines: the paths of a settlement are the job's choice (or a forged settlement's):
// whatever they are, nothing is written outside the directory, no .git is written, an existing
// file is kept unless Overwrite, and a symlink in the directory leads nowhere.
func TestSaveAllConfines(t *testing.T) {
	open := func(p string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("from the job")), nil }
	cases := []struct {
		name      string
		paths     []string
		overwrite bool
		want      error // nil: written
	}{
		{name: "plain", paths: []string{"out/a.csv", "b.txt"}},
		{name: "parent", paths: []string{"../x"}, want: ErrUnsafeArtifactPath},
		{name: "parent inside", paths: []string{"out/../../x"}, want: ErrUnsafeArtifactPath},
		{name: "absolute", paths: []string{"/tmp/x"}, want: ErrUnsafeArtifactPath},
		{name: "git config", paths: []string{".git/config"}, want: ErrUnsafeArtifactPath},
		{name: "git in case", paths: []string{"sub/.GIT/hooks/pre-commit"}, want: ErrUnsafeArtifactPath},
		{name: "existing file", paths: []string{"new.txt", "mine.txt"}, want: ErrArtifactExists},
		{name: "existing file with overwrite", paths: []string{"mine.txt"}, overwrite: true},
		{name: "through a symlink", paths: []string{"link/x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outside := t.TempDir()
			dir := filepath.Join(t.TempDir(), "job")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("the user's"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			var arts []job.Artifact
			for _, p := range c.paths {
				arts = append(arts, job.Artifact{Path: p})
			}
			err = saveAll(root, arts, open, &SaveOptions{Overwrite: c.overwrite})
			switch {
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("saveAll(%q) = %v, want %v", c.paths, err, c.want)
			case c.want == nil && c.name != "through a symlink" && err != nil:
				t.Errorf("saveAll(%q) = %v, want nil", c.paths, err)
			case c.name == "through a symlink" && err == nil:
				t.Errorf("saveAll(%q) = nil, want the escape refused", c.paths)
			}
			if ents, _ := os.ReadDir(outside); len(ents) > 0 {
				t.Errorf("saveAll(%q) wrote %s outside the directory", c.paths, ents[0].Name())
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x")); err == nil {
				t.Errorf("saveAll(%q) wrote beside the directory", c.paths)
			}
			mine, _ := os.ReadFile(filepath.Join(dir, "mine.txt"))
			if wantMine := map[bool]string{false: "the user's", true: "from the job"}[c.overwrite]; string(mine) != wantMine {
				t.Errorf("after saveAll(%q) mine.txt = %q, want %q", c.paths, mine, wantMine)
			}
			if c.want == ErrArtifactExists {
				if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
					t.Errorf("saveAll(%q) wrote new.txt before refusing, want nothing written", c.paths)
				}
			}
		})
	}
}
