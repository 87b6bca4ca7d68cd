package namespace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestStateDirRefused: the provider refuses a state or lock directory another user made or
// can change, or a symbolic link.
func TestStateDirRefused(t *testing.T) {
	testenv.NeedRoot(t)
	base := t.TempDir()
	other := filepath.Join(base, "other")
	open := filepath.Join(base, "open")
	link := filepath.Join(base, "link")
	for _, d := range []string{other, open} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(other, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	// A link another user owns, to root's directory: they may point it elsewhere later.
	otherLink := filepath.Join(base, "other-link")
	if err := os.Symlink(t.TempDir(), otherLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(otherLink, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir, want string }{
		{"another uid's", other, "owned by uid 1000"},
		{"writable by all", open, "writable by others"},
		{"a symlink", link, "symbolic link"},
		{"under another uid's", filepath.Join(other, "sub"), "owned by uid 1000"},
		{"through another uid's link", filepath.Join(otherLink, "sub"), "owned by uid 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range []namespace.Options{
				{CgroupName: "runfleet-test", StateDir: c.dir, UIDBase: testUIDBase, UIDLockDir: t.TempDir()},
				{CgroupName: "runfleet-test", StateDir: t.TempDir(), UIDBase: testUIDBase, UIDLockDir: c.dir},
			} {
				p, err := namespace.New(o)
				if err == nil {
					p.Close()
					t.Errorf("New(%+v) = nil error, want it refused", o)
				} else if !strings.Contains(err.Error(), c.want) {
					t.Errorf("New() error = %v, want %q", err, c.want)
				}
			}
		})
	}
}

// TestUIDRangeRefused: a uid range that the host gives to a user, a group or subordinate ids is
// refused at start with one line naming the overlap.
func TestUIDRangeRefused(t *testing.T) {
	testenv.NeedRoot(t)
	for _, c := range []struct{ name, file, content, want string }{
		{"passwd user", "passwd", "root:x:0:0::/root:/bin/sh\nbob:x:400005:400005::/home/bob:/bin/sh\n", "passwd: bob has 400005-400005"},
		{"group", "group", "root:x:0:\nstaff:x:401023:\n", "group: staff has 401023-401023"},
		{"subuid", "subuid", "alice:100000:65536\ncarol:365536:65536\n", "subuid: carol has 365536-431071"},
		{"subgid", "subgid", "carol:399000:1001\n", "subgid: carol has 399000-400000"},
		{"outside", "subuid", "alice:100000:65536\nbob:401024:65536\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			etc := t.TempDir()
			if err := os.WriteFile(filepath.Join(etc, c.file), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: t.TempDir(), UIDBase: testUIDBase,
				UIDLockDir: t.TempDir(), EtcDir: etc})
			if c.want == "" {
				if err != nil {
					t.Fatalf("New() error = %v, want none", err)
				}
				p.Close()
				return
			}
			if err == nil {
				p.Close()
				t.Fatalf("New() = nil error, want the overlap with %s refused", c.file)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("New() error = %q, want one line with %q", msg, c.want)
			}
		})
	}
}
