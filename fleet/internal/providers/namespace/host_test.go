package namespace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
)

// runJob runs req in a fresh sandbox of p and returns its stdout.
func runJob(t *testing.T, p *namespace.Provider, prof sandbox.Profile, code string) string {
	t.Helper()
	r := providertest.Exec(t.Context(), t, providertest.Env{Provider: p, Profiles: profile.Set{prof.Name: prof}}, job.Request{Language: prof.Name, Code: code}, nil)
	if r.Exit.Code != 0 {
		t.Fatalf("exit %d, stderr %q", r.Exit.Code, r.Stderr)
	}
	return r.Stdout
}

// hostRootSource is the mount source of the host's root file system, as /proc/self/mountinfo
// names it (a block device on most hosts).
func hostRootSource(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && f[4] == "/" {
			if g := strings.Fields(post); len(g) >= 2 {
				return g[1]
			}
		}
	}
	t.Fatal("no root mount in /proc/self/mountinfo")
	return ""
}

// TestHostHidden: a program reads nothing of the host's kernel files, mounts or cgroups (G11),
// on a root fs and on the host's /usr.
func TestHostHidden(t *testing.T) {
	p := newProvider(t, "runfleet-test")
	src := hostRootSource(t)
	rootfs := testenv.RootFS(t)
	for _, root := range []string{rootfs, ""} {
		t.Run("root="+root, func(t *testing.T) {
			py := profile.Builtin(root, "")["python3"]
			out := runJob(t, p, py, "import os\nfor f in ('/proc/cmdline', '/proc/key-users', '/proc/sys/kernel/hostname', '/proc/version'):\n"+
				"    try:\n        open(f).read(); print(f, 'read')\n    except OSError:\n        print(f, 'denied')\n"+
				"print('sys', os.path.exists('/proc/sys'))\nprint(open('/proc/self/mountinfo').read())\nprint(open('/proc/self/cgroup').read())")
			for _, f := range []string{"/proc/cmdline", "/proc/key-users", "/proc/sys/kernel/hostname", "/proc/version"} {
				if !strings.Contains(out, f+" denied\n") {
					t.Errorf("%s readable in the sandbox", f)
				}
			}
			if !strings.Contains(out, "sys False\n") {
				t.Errorf("/proc/sys exists in the sandbox")
			}
			if rootfs != "" && strings.Contains(out, rootfs) {
				t.Errorf("the sandbox's mountinfo or cgroup shows the host's path %q:\n%s", rootfs, out)
			}
			// The source field, not a substring: where the host's root is itself an overlay (a
			// container, the cgroup v2 guest) its source reads "overlay", a word the sandbox's own
			// overlay mounts carry as their type.
			for _, line := range strings.Split(out, "\n") {
				if _, post, ok := strings.Cut(line, " - "); ok {
					if g := strings.Fields(post); len(g) >= 2 && g[1] == src {
						t.Errorf("the sandbox's mountinfo names the host's root %q: %s", src, line)
					}
				}
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Count(line, ":") == 2 && !strings.HasSuffix(line, ":/") && !strings.Contains(line, " ") {
					t.Errorf("/proc/self/cgroup line %q, want the cgroup namespace's root", line)
				}
			}
		})
	}
}

// TestNestedMountReadOnly: a writable mount nested in the root's directories is read-only in a
// sandbox: in the host's /usr (an overlay, the default), and in a directory whose name an
// overlay cannot take (a recursive bind, the fallback where overlayfs is missing).
func TestNestedMountReadOnly(t *testing.T) {
	p := newProvider(t, "runfleet-test")
	writable := func(t *testing.T, dir string) {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=1777"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	}
	write := func(path string) string {
		return "try:\n    open('" + path + "', 'w').write('x'); print('wrote')\nexcept OSError:\n    print('denied')"
	}
	t.Run("overlay", func(t *testing.T) {
		d, err := os.MkdirTemp("/usr/lib", "runfleet-test-")
		if err != nil {
			t.Skipf("cannot write under /usr/lib: %v", err)
		}
		t.Cleanup(func() { os.Remove(d) })
		writable(t, d)
		if out := runJob(t, p, profile.Builtin("", "")["python3"], write(d+"/x")); out != "denied\n" {
			t.Errorf("writing into a rw mount nested in /usr: %q, want denied", out)
		}
	})
	t.Run("bind", func(t *testing.T) {
		// A root of the host's /usr, and a directory "data:x" holding a writable mount.
		root := t.TempDir()
		usr, data := filepath.Join(root, "usr"), filepath.Join(root, "data:x", "rw")
		for _, d := range []string{usr, data} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("/usr", usr, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(usr, unix.MNT_DETACH) })
		for _, l := range []string{"bin", "lib", "lib64"} {
			if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
				t.Fatal(err)
			}
		}
		writable(t, data)
		py := profile.Builtin("", "")["python3"]
		py.Root = root
		if out := runJob(t, p, py, write("/data:x/rw/x")); out != "denied\n" {
			t.Errorf("writing into a rw mount nested in a bound directory: %q, want denied", out)
		}
	})
}

// TestHostRootFollowsAlternatives: on the host's /usr, a program reaches what the host names
// through /etc/alternatives (Debian's libblas.so.3, which numpy loads, is one), and of the
// host's /etc nothing else but a copy of matplotlib's rc, which Debian's matplotlib reads there.
func TestHostRootFollowsAlternatives(t *testing.T) {
	links, _ := filepath.Glob("/usr/bin/*")
	var link string
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, "/etc/alternatives/") {
			if _, err := os.Stat(l); err == nil {
				link = l
				break
			}
		}
	}
	if link == "" {
		t.Skip("no program of the host's /usr/bin is named through /etc/alternatives")
	}
	p := newProvider(t, "runfleet-test")
	out := runJob(t, p, profile.Builtin("", "")["python3"], "import os\n"+
		"print(os.path.exists('"+link+"'))\nprint(sorted(os.listdir('/etc')))")
	etcWant := "['alternatives', 'group', 'hosts', 'nsswitch.conf', 'passwd']\n"
	if _, err := os.Stat("/etc/matplotlibrc"); err == nil {
		etcWant = "['alternatives', 'group', 'hosts', 'matplotlibrc', 'nsswitch.conf', 'passwd']\n"
	}
	if out != "True\n"+etcWant {
		t.Errorf("stdout %q; want %s reached and /etc holding alternatives and the sandbox's own files", out, link)
	}
}
