package namespace

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/sandbox"
)

// initArg is argv[0] of the worker binary re-executed as a sandbox's first process.
const initArg = "runfleet-sandbox-init"

// initConfig is what the provider tells the init process, on fd 3, once the init is in its cgroup.
type initConfig struct {
	MountPoint     string   `json:"mount_point"`
	Root           string   `json:"root"`
	UID            int      `json:"uid"`
	Argv           []string `json:"argv"`
	Env            []string `json:"env"`
	WorkspaceBytes int64    `json:"workspace_bytes"`
	TmpBytes       int64    `json:"tmp_bytes"`
}

// Init runs the sandbox init when this process was started as one, and never returns then.
// Programs that use the provider call it first in main, and test binaries in TestMain: the
// provider starts sandboxes by re-executing its own binary, since Go cannot run code between fork
// and exec.
func Init() {
	if len(os.Args) == 0 || os.Args[0] != initArg {
		return
	}
	status := os.NewFile(4, "status")
	syscall.CloseOnExec(4)
	// initSandbox returns only when it failed: on success the interpreter replaced this process.
	fmt.Fprintf(status, "%v", initSandbox())
	os.Exit(1)
}

func initSandbox() error {
	cfgFile := os.NewFile(3, "config")
	var c initConfig
	if err := json.NewDecoder(cfgFile).Decode(&c); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cfgFile.Close()
	if err := buildRoot(c); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := os.Chdir("/workspace"); err != nil {
		return err
	}
	for _, rl := range []struct {
		res int
		max uint64
	}{
		{unix.RLIMIT_CORE, 0},
		{unix.RLIMIT_NOFILE, 1024},
		{unix.RLIMIT_FSIZE, uint64(max(c.WorkspaceBytes, c.TmpBytes))},
	} {
		if err := unix.Setrlimit(rl.res, &unix.Rlimit{Cur: rl.max, Max: rl.max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.res, err)
		}
	}
	for capability := 0; capability <= 63; capability++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(capability), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d: %w", capability, err)
		}
	}
	// The syscall package's credential calls change every thread of the process, not just one.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(c.UID, c.UID, c.UID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(c.UID, c.UID, c.UID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	if err := seccomp.LoadFilter(seccompFilter()); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	err := syscall.Exec(c.Argv[0], c.Argv, c.Env)
	return fmt.Errorf("exec %s: %w", c.Argv[0], err)
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	return nil
}

// bindRO binds source at target read-only; a bind mount takes its flags only on a remount.
func bindRO(source, target string) error {
	if err := mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
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
			if err := bindRO(from, to); err != nil {
				return err
			}
		}
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
	if err := mount("proc", filepath.Join(nr, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=2"); err != nil {
		return err
	}
	if err := buildDev(filepath.Join(nr, "dev")); err != nil {
		return err
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

// writeEtc gives a sandbox on the host's /usr the few files programs look for, instead of the
// host's /etc.
func writeEtc(root string, uid int) error {
	etc := filepath.Join(root, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/workspace:/usr/sbin/nologin\n", uid, uid),
		"group":         fmt.Sprintf("root:x:0:\nsandbox:x:%d:\n", uid),
		"hosts":         "127.0.0.1 localhost sandbox\n::1 localhost\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
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
	for _, name := range []string{"null", "zero", "full", "random", "urandom"} {
		target := filepath.Join(dev, name)
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

func seccompFilter() seccomp.Filter {
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: eperm, Names: sandbox.DeniedSyscalls},
				// clone3 passes its flags in memory a filter cannot read; ENOSYS makes libc fall back to clone.
				{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
				{Action: seccomp.ActionErrno | seccomp.Action(unix.EAFNOSUPPORT), NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_VSOCK}}},
				}},
				// clone with CLONE_NEWUSER would make a user namespace, unshare's other door.
				{Action: eperm, NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
				}},
			},
		},
	}
}
