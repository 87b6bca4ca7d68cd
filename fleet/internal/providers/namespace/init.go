package namespace

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// initArg is argv[0] of the worker binary re-executed as a sandbox's supervisor.
const initArg = "runfleet-sandbox-init"

// Files the provider passes to the supervisor, after stdin, stdout and stderr.
const (
	fdConfig   = 3 // initConfig as JSON, then EOF
	fdStatus   = 4 // "ok" once the program runs, then "exit <wait status>"; or an error
	fdLifeline = 5 // read end of a pipe only the worker writes: EOF means the worker is gone
	fdUIDLock  = 6 // the sandbox uid's lock, held as long as the supervisor lives
)

// initConfig is what the provider tells the supervisor once it is in its cgroup.
type initConfig struct {
	MountPoint     string   `json:"mount_point"`
	Root           string   `json:"root"`
	Hide           []string `json:"hide"` // host paths to mask in the default root
	UID            int      `json:"uid"`
	Argv           []string `json:"argv"`
	Env            []string `json:"env"`
	WorkspaceBytes int64    `json:"workspace_bytes"`
	TmpBytes       int64    `json:"tmp_bytes"`
	Filter         []byte   `json:"filter"` // struct sock_filter array, host order: see encodeFilter
	// Forked: the program is forked by the profile's zygote, not started here (see zygote.go).
	Forked bool `json:"forked,omitempty"`
}

// Init runs the sandbox supervisor when this process was started as one, and never returns then.
// Programs that use the provider call it first in main, and test binaries in TestMain: the
// provider starts sandboxes by re-executing its own binary, since Go cannot run code between fork
// and exec.
//
// The supervisor is pid 1 of the sandbox's pid namespace. It builds the root, keeps only the
// capabilities to switch uids, loads the seccomp filter, and starts the program under the sandbox
// uid. It never changes its own credentials, so nothing clears its hold on the worker: when the
// lifeline pipe reaches EOF (the worker exited, was killed or OOM-killed: the kernel closes its
// files), the supervisor exits, and the kernel kills everything left in the namespace. When the
// program ends, it kills what the program left, reports the status and waits, so that the worker
// can read /workspace (see [sandbox.FileReader]) before Destroy kills it.
func Init() {
	if len(os.Args) > 0 && os.Args[0] == zygoteArg {
		zygoteInit()
	}
	if len(os.Args) == 0 || os.Args[0] != initArg {
		return
	}
	runtime.GOMAXPROCS(1)
	sandbox.UnignoreInherited()
	// Capabilities and the bounding set are a thread's, not the process's: the thread that drops
	// them (prepare) is the one that forks the program, so the program inherits what it dropped.
	runtime.LockOSThread()
	// Nothing the supervisor holds reaches the program: its files 3-6, and whatever else the
	// worker was started with and passed on unknowingly.
	closeOnExecFrom(3)
	status := os.NewFile(fdStatus, "status")
	lifeline := os.NewFile(fdLifeline, "lifeline")
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		// The worker is gone. The uid lock (fdUIDLock) is released when this process exits,
		// before the kernel would kill the rest of the namespace: so end every process first.
		sandbox.KillAll()
		waitForkedGone()
		os.Exit(137)
	}()
	// SIGUSR1 from the worker ends the program (a timeout, a kill) but keeps /workspace.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
	}()
	sandbox.HoldThreads(sandbox.SupervisorTasks)
	ws, err := supervise(status)
	if err != nil {
		fmt.Fprintf(status, "%v", err)
		os.Exit(1)
	}
	// Every process of the program ends before its status is told; the supervisor then keeps
	// the namespace, and with it /workspace, until the worker is done reading its files and
	// destroys the sandbox, or is gone.
	sandbox.KillAll()
	fmt.Fprintf(status, "exit %d\n", uint32(ws))
	select {}
}

// supervise prepares the sandbox, runs the program and returns its wait status.
func supervise(status io.Writer) (syscall.WaitStatus, error) {
	cfgFile := os.NewFile(fdConfig, "config")
	var c initConfig
	dec := json.NewDecoder(cfgFile)
	if err := dec.Decode(&c); err != nil {
		return 0, fmt.Errorf("read config: %w", err)
	}
	if !c.Forked {
		cfgFile.Close()
	}
	// The provider sent the config once the supervisor was in the sandbox's cgroup: a cgroup
	// namespace made now has that cgroup as its root, and shows the program nothing above it.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return 0, fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	if err := prepare(c); err != nil {
		return 0, err
	}
	if c.Forked {
		superviseForked(status, io.MultiReader(dec.Buffered(), cfgFile))
		cfgFile.Close() // the zygote could not start: the program is exec'd as below
	}
	pid, err := syscall.ForkExec(c.Argv[0], c.Argv, &syscall.ProcAttr{
		Dir:   "/workspace",
		Env:   c.Env,
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.UID), Groups: []uint32{}},
			Setsid:     true,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("exec %s: %w", c.Argv[0], err)
	}
	// The supervisor keeps no end of the program's stdio: the program alone holds its stdin. Its
	// own stderr is the status pipe from now on, so that a crash report of the Go runtime reaches
	// the worker's log instead of the job's output.
	if null, err := os.Open("/dev/null"); err == nil {
		for fd := range 2 {
			_ = unix.Dup3(int(null.Fd()), fd, 0)
		}
		null.Close()
	}
	_ = unix.Dup3(fdStatus, 2, 0)
	if _, err := io.WriteString(status, "ok\n"); err != nil {
		return 0, err
	}
	return sandbox.ReapUntil(pid)
}

// prepare builds the root and drops what the supervisor does not need; the program it starts
// inherits the filter and no_new_privs, and loses the remaining capabilities when its uid changes.
func prepare(c initConfig) error {
	if err := buildRoot(c); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	for _, rl := range []struct {
		res int
		max uint64
	}{
		{unix.RLIMIT_CORE, 1}, // 1, not 0: a pipe core_pattern runs its helper unless the limit is exactly 1
		{unix.RLIMIT_NOFILE, 1024},
		{unix.RLIMIT_FSIZE, uint64(max(c.WorkspaceBytes, c.TmpBytes))},
	} {
		if err := unix.Setrlimit(rl.res, &unix.Rlimit{Cur: rl.max, Max: rl.max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.res, err)
		}
	}
	// CAP_KILL ends the program's processes (other uid) while the supervisor stays; the program
	// gets none of these: its uid change clears them, and no_new_privs keeps it from regaining one.
	// The bounding set is emptied whole: the supervisor keeps what it holds, and the program
	// starts with an empty set, as in a container with every capability dropped.
	keep := uint64(1)<<unix.CAP_SETUID | uint64(1)<<unix.CAP_SETGID | uint64(1)<<unix.CAP_KILL
	for capability := 0; capability <= 63; capability++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(capability), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", capability, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: uint32(keep), Permitted: uint32(keep)}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	// Not dumpable: a program of the same namespace cannot open the supervisor's /proc files.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	return loadFilter(c.Filter)
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	return nil
}

// staging is where the root's directories are taken from: a private tmpfs under the new root
// holding a bind of each (under l/) and an empty directory (e), detached once the root is built.
type staging struct{ dir string }

func newStaging(nr string) (*staging, error) {
	st := &staging{dir: filepath.Join(nr, ".stage")}
	if err := os.Mkdir(st.dir, 0o700); err != nil {
		return nil, err
	}
	if err := mount("tmpfs", st.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,mode=0700"); err != nil {
		return nil, err
	}
	for _, d := range []string{"l", "e"} {
		if err := os.Mkdir(filepath.Join(st.dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// mountRO mounts the directory from at target, read-only with whatever is mounted under it.
//
// It is an overlay with no upper layer, which shows none of the mounts from nests, and which
// /proc/self/mountinfo names by paths relative to the staging directory (the mount was made from
// it), not by the host's device and paths. Overlayfs takes two lower layers at least without an
// upper one: the second is empty. Where overlayfs is missing (a kernel without the module, a
// minimal initramfs), a recursive bind made read-only throughout does, and mountinfo shows the
// host's device.
func (st *staging) mountRO(from, target string) error {
	name := filepath.Base(target)
	layer := filepath.Join("l", name)
	if err := os.Mkdir(filepath.Join(st.dir, layer), 0o700); err != nil {
		return err
	}
	if err := mount(from, filepath.Join(st.dir, layer), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if err := os.Chdir(st.dir); err != nil {
		return err
	}
	if !strings.ContainsAny(name, ":,\\") &&
		unix.Mount("sandbox", target, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+layer+":e") == nil {
		return nil
	}
	if err := mount(layer, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(unix.AT_FDCWD, target, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", target, err)
	}
	return nil
}

// close detaches the staging directory; the overlays keep what they need of it.
func (st *staging) close() error {
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount(st.dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", st.dir, err)
	}
	return os.Remove(st.dir)
}

// closeOnExecFrom marks every descriptor from fd on close-on-exec.
func closeOnExecFrom(fd uint) {
	if unix.CloseRange(fd, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one by one.
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= int(fd) {
			syscall.CloseOnExec(n)
		}
	}
}

// skipped are top-level directories of a root file system that a sandbox gets fresh or never.
var skipped = map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true,
	"workspace": true, "mnt": true, "media": true, "boot": true, "home": true, "root": true, "lost+found": true}

func buildRoot(c initConfig) error {
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	nr := c.MountPoint
	if err := mount("tmpfs", nr, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return err
	}
	src := c.Root
	entries := []string{"usr", "bin", "lib", "lib64", "sbin"}
	if src != "" {
		des, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("root %s: %w", src, err)
		}
		entries = entries[:0]
		for _, de := range des {
			entries = append(entries, de.Name())
		}
	} else {
		src = "/"
	}
	st, err := newStaging(nr)
	if err != nil {
		return err
	}
	for _, name := range entries {
		if skipped[name] {
			continue
		}
		from, to := filepath.Join(src, name), filepath.Join(nr, name)
		fi, err := os.Lstat(from)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			if err := st.mountRO(from, to); err != nil {
				return err
			}
		}
	}
	if c.Root == "" {
		if err := os.Mkdir(filepath.Join(nr, "etc"), 0o755); err != nil {
			return err
		}
		// The host's /usr names some libraries through /etc/alternatives (Debian's libblas.so.3,
		// which numpy loads): its links, read-only, and nothing else of the host's /etc.
		if fi, err := os.Stat("/etc/alternatives"); err == nil && fi.IsDir() {
			to := filepath.Join(nr, "etc", "alternatives")
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			if err := st.mountRO("/etc/alternatives", to); err != nil {
				return err
			}
		}
	}
	if err := st.close(); err != nil {
		return err
	}
	if c.Root == "" {
		if err := writeEtc(nr, c.UID); err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "dev", "tmp", "workspace", ".old"} {
		if err := os.Mkdir(filepath.Join(nr, d), 0o755); err != nil {
			return err
		}
	}
	// subset=pid shows only the processes of the namespace, not the kernel's files about the
	// host (cmdline, key-users, sys, ...); hidepid=invisible hides the supervisor's from the program.
	if err := mount("proc", filepath.Join(nr, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible,subset=pid"); err != nil {
		return err
	}
	if err := buildDev(filepath.Join(nr, "dev")); err != nil {
		return err
	}
	if c.Root == "" {
		if err := hide(nr, c.Hide); err != nil {
			return err
		}
	}
	if err := mount("tmpfs", filepath.Join(nr, "workspace"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,mode=0700,uid=%d,gid=%d", c.WorkspaceBytes, c.UID, c.UID)); err != nil {
		return err
	}
	if err := mount("tmpfs", filepath.Join(nr, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,mode=1777", c.TmpBytes)); err != nil {
		return err
	}
	if err := unix.PivotRoot(nr, filepath.Join(nr, ".old")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount old root: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return err
	}
	return mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

// hide masks host paths under the new root nr: a directory with an empty read-only tmpfs, a
// file with a device node that cannot be opened. A path the root does not hold is skipped.
func hide(nr string, paths []string) error {
	for _, p := range paths {
		target := filepath.Join(nr, p)
		fi, err := os.Stat(target)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			if err := mount("tmpfs", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0755"); err != nil {
				return err
			}
			continue
		}
		// A file: the sandbox's /dev/null on a nodev bind, which cannot even be opened.
		if err := mount(filepath.Join(nr, "dev", "null"), target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return nil
}

// writeEtc gives a sandbox on the host's /usr the few files programs look for, instead of the
// host's /etc.
func writeEtc(root string, uid int) error {
	etc := filepath.Join(root, "etc")
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/workspace:/usr/sbin/nologin\n", uid, uid),
		"group":         fmt.Sprintf("root:x:0:\nsandbox:x:%d:\n", uid),
		"hosts":         "127.0.0.1 localhost sandbox\n::1 localhost\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
	}
	// Debian's matplotlib (python3-data) reads its rc from /etc/matplotlibrc alone, and refuses
	// to import without it: a copy of the host's.
	if b, err := os.ReadFile("/etc/matplotlibrc"); err == nil {
		files["matplotlibrc"] = string(b)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func buildDev(dev string) error {
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return err
	}
	// Nodes of the sandbox's own, not binds of the host's: a bind shows the host's devtmpfs in
	// /proc/self/mountinfo. Where mknod is refused (a devices cgroup), the host's are bound.
	for name, minor := range map[string]uint32{"null": 3, "zero": 5, "full": 7, "random": 8, "urandom": 9} {
		target := filepath.Join(dev, name)
		if err := unix.Mknod(target, unix.S_IFCHR|0o666, int(unix.Mkdev(1, minor))); err == nil {
			// The umask took bits off.
			if err := os.Chmod(target, 0o666); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return err
		}
		if err := mount("/dev/"+name, target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16m,mode=1777"); err != nil {
		return err
	}
	return mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755")
}

// loopbackUp brings lo up, as Docker's network mode none does; the namespace has no other interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}
