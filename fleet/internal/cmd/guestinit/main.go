//go:build linux

// Command guestinit is pid 1 of the cgroup v2 guest that internal/vmtest boots: it loads the
// modules the initramfs carries, makes the sandbox root fs the guest's root, runs every test
// binary it is given and powers the guest off. Its last console line is the verdict the host
// reads; a guest that ends without it failed.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Lines the host reads on the console; the test binaries' own output passes between them.
const (
	mark     = "runfleet-vmtest:"
	verdict  = mark + " done"
	failures = mark + " failed"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "container" {
		container(os.Args[2], os.Args[2:])
		return
	}
	console()
	start := time.Now()
	err := run()
	if err != nil {
		fmt.Printf("%s %v\n", failures, err)
	} else {
		fmt.Printf("%s in %.1fs\n", verdict, time.Since(start).Seconds())
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// console makes /dev/console stdin, stdout and stderr: an initramfs without the device node
// leaves pid 1 with none.
func console() {
	_ = os.MkdirAll("/dev", 0o755)
	_ = unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	if fd, err := unix.Open("/dev/console", unix.O_RDWR, 0); err == nil {
		for i := range 3 {
			_ = unix.Dup2(fd, i)
		}
	}
}

func run() error {
	for _, m := range [][3]string{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}} {
		if err := mount(m[0], m[1], m[2], 0, ""); err != nil {
			return err
		}
	}
	if err := loadModules("/modules"); err != nil {
		return err
	}
	if err := switchRoot(); err != nil {
		return err
	}
	for _, m := range []struct{ src, dir, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", ""},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=755"},
	} {
		if err := mount(m.src, m.dir, m.fstype, 0, m.data); err != nil {
			return err
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		fmt.Printf("%s cgroup2 controllers: %s", mark, b)
	}
	bins, err := filepath.Glob("/vmtest/*.test")
	if err != nil || len(bins) == 0 {
		return fmt.Errorf("no test binaries in /vmtest: %v", err)
	}
	raw, err := os.ReadFile("/vmtest/args")
	if err != nil {
		return err
	}
	args := strings.FieldsFunc(string(raw), func(r rune) bool { return r == '\n' })
	var failed []string
	for _, place := range []string{"service", "container"} {
		for _, bin := range bins {
			code, took, err := runTest(place, bin, args)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s %s exit %d in %.1fs\n", mark, place, filepath.Base(bin), code, took.Seconds())
			if code != 0 {
				failed = append(failed, place+"/"+filepath.Base(bin))
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, " "))
	}
	return nil
}

func mount(src, dir, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dir, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, dir, err)
	}
	return nil
}

// loadModules loads the modules in dir in the order of their names, which the host chose so
// that each comes after what it depends on.
func loadModules(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load module %s: %w", name, err)
		}
	}
	return nil
}

// switchRoot makes an overlay of the read-only sandbox root fs (9p tag rootfs) and a tmpfs the
// guest's root, with the same root fs read-only at /rootfs for the sandboxes and the test
// binaries (9p tag vmtest) at /vmtest. The namespace provider's pivot_root refuses an initramfs
// root, so the guest must leave it.
func switchRoot() error {
	ninep := "trans=virtio,version=9p2000.L,msize=262144,cache=loose"
	steps := []struct {
		src, dir, fstype string
		flags            uintptr
		data             string
	}{
		{"rootfs", "/lower", "9p", unix.MS_RDONLY, ninep},
		{"tmpfs", "/upper", "tmpfs", 0, "mode=755"},
		{"overlay", "/newroot", "overlay", 0, "lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work"},
		{"/lower", "/newroot/rootfs", "", unix.MS_BIND, ""},
		{"vmtest", "/newroot/vmtest", "9p", unix.MS_RDONLY, ninep},
	}
	for _, s := range steps {
		if s.fstype == "overlay" {
			for _, d := range []string{"/upper/data", "/upper/work"} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
		}
		if err := mount(s.src, s.dir, s.fstype, s.flags, s.data); err != nil {
			return err
		}
	}
	// A bind mount keeps the source's flags only after a remount.
	if err := unix.Mount("", "/newroot/rootfs", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remount /rootfs read-only: %w", err)
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		_ = unix.Unmount(d, unix.MNT_DETACH)
	}
	if err := os.Chdir("/newroot"); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the new root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return os.Chdir("/")
}

// serviceCgroup makes a cgroup for one test binary, as systemd makes a service's with
// Delegate=yes: below the root, with the memory, pids and cpu controllers, holding processes, so
// that the provider must move itself into a leaf before it can hand them on.
func serviceCgroup(name string) (*os.File, error) {
	dir := "/sys/fs/cgroup"
	for _, d := range []string{"system.slice", name + ".service"} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0o644); err != nil {
			return nil, fmt.Errorf("delegate controllers below %s: %w", dir, err)
		}
		dir = filepath.Join(dir, d)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	return os.Open(dir)
}

// container execs bin with its own cgroup namespace rooted at its cgroup, which is bound on
// /sys/fs/cgroup, as a container on a cgroup v2 host sees the tree: its own cgroup is "/", yet
// not the root, so it may not hold processes and hand controllers on at once. The parent made
// the mount namespace; a cgroup namespace is per thread until exec. (A cgroup2 mount made in the
// new namespace is refused here with EBUSY, hence the bind mount.)
func container(bin string, argv []string) {
	runtime.LockOSThread()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err == nil {
		err = unix.Unshare(unix.CLONE_NEWCGROUP)
	}
	if err == nil {
		err = mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	}
	if err == nil {
		dir := filepath.Join("/sys/fs/cgroup", strings.TrimSpace(strings.TrimPrefix(string(own), "0::")))
		err = mount(dir, "/sys/fs/cgroup", "", unix.MS_BIND, "")
	}
	if err == nil {
		err = unix.Exec(bin, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "%s container %s: %v\n", mark, bin, err)
	os.Exit(125)
}

// runTest runs one test binary in a service cgroup of its own, in place "service" or
// "container", and waits for it alone: pid 1 also inherits every orphan, which it reaps on the
// way without mistaking it for the test.
func runTest(place, bin string, args []string) (int, time.Duration, error) {
	cgroup, err := serviceCgroup(place + "-" + strings.TrimSuffix(filepath.Base(bin), ".test"))
	if err != nil {
		return 0, 0, err
	}
	defer cgroup.Close()
	fmt.Printf("%s run %s %s %s\n", mark, place, filepath.Base(bin), strings.Join(args, " "))
	start := time.Now()
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"TMPDIR=/tmp", "CI=true", "RUNFLEET_TEST_ROOTFS=/rootfs", "RUNFLEET_VMTEST_GUEST=1"}
	sys := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgroup.Fd())}
	exe, argv := bin, append([]string{bin}, args...)
	if place == "container" {
		sys.Cloneflags = syscall.CLONE_NEWNS
		exe, argv = "/proc/self/exe", append([]string{"init", "container"}, argv...)
	}
	p, err := os.StartProcess(exe, argv, &os.ProcAttr{
		Dir: "/tmp", Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("start %s: %w", bin, err)
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("wait for %s: %w", bin, err)
		}
		if pid != p.Pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), time.Since(start), nil
		}
		return ws.ExitStatus(), time.Since(start), nil
	}
}
