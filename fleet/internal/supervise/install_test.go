package supervise

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPrivateCopyRefusesOrReplaces: no other user's directory, symlink or file is ever used as
// the init's copy: each is refused, or replaced by the real content.
func TestPrivateCopyRefusesOrReplaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files of another uid")
	}
	const other = 54321
	src := filepath.Join(t.TempDir(), "worker")
	want := bytes.Repeat([]byte("real init "), 1000)
	if err := os.WriteFile(src, want, 0o755); err != nil {
		t.Fatal(err)
	}
	// The name PrivateCopyFile gives the copy of src, and its content.
	name := func(t *testing.T) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "probe")
		dst, err := PrivateCopyFile(src, dir)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Base(dst)
	}(t)
	mustUse := func(t *testing.T, dir string) {
		t.Helper()
		dst, err := PrivateCopyFile(src, dir)
		if err != nil {
			t.Fatalf("PrivateCopyFile() error = %v", err)
		}
		fi, err := os.Lstat(dst)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(dst)
		if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o711 || st.Uid != 0 || !bytes.Equal(got, want) {
			t.Errorf("copy is %v uid %d, %d bytes (equal: %v); want a root-owned 0711 regular file of the init's bytes",
				fi.Mode(), st.Uid, len(got), bytes.Equal(got, want))
		}
	}
	t.Run("directory of another uid refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, other, other); err != nil {
			t.Fatal(err)
		}
		if dst, err := PrivateCopyFile(src, dir); err == nil {
			t.Errorf("PrivateCopyFile() into a directory of uid %d = %s, want an error", other, dst)
		}
	})
	t.Run("parent of another uid refused", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "parent")
		if err := os.Mkdir(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(parent, other, other); err != nil {
			t.Fatal(err)
		}
		if dst, err := PrivateCopyFile(src, filepath.Join(parent, "state")); err == nil {
			t.Errorf("PrivateCopyFile() under a directory of uid %d = %s, want an error", other, dst)
		}
	})
	t.Run("world-writable directory refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if dst, err := PrivateCopyFile(src, dir); err == nil {
			t.Errorf("PrivateCopyFile() into a mode 0777 directory = %s, want an error", dst)
		}
	})
	t.Run("symlinked directory refused", func(t *testing.T) {
		base := t.TempDir()
		target := filepath.Join(base, "elsewhere")
		if err := os.Mkdir(target, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(base, "state")); err != nil {
			t.Fatal(err)
		}
		if dst, err := PrivateCopyFile(src, filepath.Join(base, "state")); err == nil {
			t.Errorf("PrivateCopyFile() into a symlink = %s, want an error", dst)
		}
	})
	t.Run("same-size file of other bytes replaced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		forged := bytes.Repeat([]byte("evil init "), 1000)
		if err := os.WriteFile(filepath.Join(dir, name), forged, 0o711); err != nil {
			t.Fatal(err)
		}
		mustUse(t, dir)
	})
	t.Run("file of another uid replaced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.WriteFile(dst, want, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dst, other, other); err != nil {
			t.Fatal(err)
		}
		mustUse(t, dir)
	})
	t.Run("symlinked file replaced, its target untouched", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(t.TempDir(), "target")
		if err := os.WriteFile(target, []byte("attacker's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		mustUse(t, dir)
		if got, _ := os.ReadFile(target); string(got) != "attacker's" {
			t.Errorf("the symlink's target was written: %q", strings.TrimSpace(string(got)))
		}
	})
	t.Run("verified copy reused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		mustUse(t, dir)
		before, _ := os.Lstat(filepath.Join(dir, name))
		mustUse(t, dir)
		after, _ := os.Lstat(filepath.Join(dir, name))
		if !os.SameFile(before, after) {
			t.Errorf("a verified copy was written again")
		}
	})
}
