package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A workspace of more entries than a walk takes: the files before the bound are read, then
// the walk ends with ErrWalkBound instead of listing the rest.
func TestWalkFilesEntryBound(t *testing.T) {
	// On tmpfs, as /workspace is: a disk makes the test slow for nothing.
	dir, err := os.MkdirTemp("/dev/shm", "walk-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	many := filepath.Join(dir, "b")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range MaxWalkEntries {
		f, err := os.Create(filepath.Join(many, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var got []string
	err = WalkFiles(t.Context(), dir, func(string) bool { return true }, func(p string, _ int64, _ io.Reader) error {
		got = append(got, p)
		return nil
	})
	if !errors.Is(err, ErrWalkBound) || !slices.Equal(got, []string{"a.txt"}) {
		t.Errorf("WalkFiles() = %q, %v; want [a.txt], ErrWalkBound", got, err)
	}
}
