package namespace

// A zygote is an interpreter that has done a profile's imports and forks each sandbox's program,
// so that a sandbox does not exec and initialize its interpreter (three quarters of its CPU for
// python3, more for python3-data, whose imports take most of a second).
//
// The provider starts one per profile (Profile.Zygote set) the first time a sandbox of it is
// made, and again when it died or served zygoteForks sandboxes. It runs as root in the worker's
// pid namespace and cgroup, in mount, net, ipc and uts namespaces of its own whose root is built
// as a sandbox's (zygoteInit); it reads requests from the worker only, on a socket, and never a
// job's byte. A sandbox is made as before, its supervisor pid 1 of fresh namespaces, in its own
// cgroup, under its own uid; only its program comes from the zygote:
//
//  1. The supervisor builds the root, loads the filter on itself and reports "enter".
//  2. The worker sends the zygote the program's stdio, the supervisor's namespaces (opened from
//     /proc/<pid>/ns/* right after the supervisor started, while it was still dumpable: a worker
//     without CAP_SYS_PTRACE, as in a pod, cannot open them later) and its cgroup. The zygote
//     enters the pid namespace for its children only (setns: its own stays) and clones the child
//     with CLONE_PARENT, so the child's parent is the worker; on cgroup v2 the child is born in
//     the sandbox's cgroup (CLONE_INTO_CGROUP).
//  3. The child, a single thread running the zygote's own code, joins the cgroup (v1), makes a
//     cgroup namespace rooted there (as the supervisor did), enters the uts, ipc, net and mount
//     namespaces, closes every other file, sets the session,
//     rlimits, an empty bounding set, the sandbox uid (which clears its capabilities),
//     no_new_privs and the seccomp filter, and only then runs the bootstrap, which writes the
//     ready line and reads the payload: the job's first byte meets what an exec'd program meets.
//  4. The worker tells the supervisor the child's pid in its namespace; the supervisor watches it
//     (pidfd), kills what is left once it ended and reports "ended"; the worker reaps the child
//     and takes its status. A zygote's death ends nothing it forked: their parent is the worker.
//
// What a child shares with the zygote, and so with its siblings, is what a fork shares: the
// address layout (new mappings included: the kernel randomizes mmap's base at exec), the
// str/bytes hash secret (fixed when an interpreter starts: strings hashed in the zygote's
// dictionaries keep it), the state of every imported module as the zygote left it, which no job
// has touched, and what is left in the zygote's memory of the worker's earlier requests (sandbox
// uids, the host pids of earlier children): nothing of a job, which the zygote never receives. random reseeds itself at fork, numpy's global generator is reseeded by the
// child. A job can read the hash secret and the layout; retiring a zygote after zygoteForks
// sandboxes bounds the siblings that share them.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// zygoteArg is argv[0] of the supervisor binary started to build a zygote's root and exec it.
const zygoteArg = "runfleet-zygote-init"

// Files of the zygote: the control socket and the seccomp program, as the zygote reads them, and
// the config zygoteInit reads before it execs the zygote.
const (
	zfdControl = 3
	zfdFilter  = 4
	zfdConfig  = 5
)

// zygoteForks is how many sandboxes a zygote forks before the provider starts a new one.
const zygoteForks = 256

// zygoteStartTimeout bounds a zygote's imports: python3-data's take seconds on a loaded machine,
// and a minute in an emulated guest. A Create waits for them only until its own deadline; the
// zygote goes on starting for the next.
const zygoteStartTimeout = 2 * time.Minute

// errZygoteLost is a zygote that died or broke its protocol: another one may serve.
var errZygoteLost = errors.New("zygote lost")

// errZygoteNotReady is a zygote that died or timed out before it was ready: its profile's imports
// fail on this root (python3-data's on a root without numpy's libraries), or take too long.
var errZygoteNotReady = fmt.Errorf("not ready: %w", errZygoteLost)

// zygoteInit builds a root as a sandbox's supervisor does and execs the zygote in it, as root
// and with every capability: its children need them to enter a sandbox. It never returns.
func zygoteInit() {
	sandbox.UnignoreInherited()
	closeOnExecFrom(3)
	err := execZygote()
	fmt.Fprintf(os.Stderr, "runfleet zygote: %v\n", err)
	os.Exit(1)
}

func execZygote() error {
	f := os.NewFile(zfdConfig, "config")
	var c initConfig
	if err := json.NewDecoder(f).Decode(&c); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	f.Close()
	if err := buildRoot(c); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("zygote")); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	for _, fd := range []int{zfdControl, zfdFilter} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return err
		}
	}
	return syscall.Exec(c.Argv[0], c.Argv, c.Env)
}

// superviseForked is a supervisor's part when the zygote forks its program: it reports "enter",
// reads the program's pid, and once the program ended kills every process left and reports
// "ended" (the worker, the program's parent, holds its status). It returns only when the pid is
// 0: the profile's zygote could not start, and the supervisor execs the program itself.
func superviseForked(status io.Writer, cfg io.Reader) {
	fail := func(err error) {
		fmt.Fprintf(status, "%v", err)
		os.Exit(1)
	}
	if _, err := io.WriteString(status, "enter\n"); err != nil {
		fail(err)
	}
	var pid int
	if _, err := fmt.Fscan(cfg, &pid); err != nil {
		fail(fmt.Errorf("read program pid: %w", err))
	}
	if pid == 0 {
		return
	}
	forkedPid.Store(int64(pid))
	// ESRCH: the program ended and its parent reaped it already.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil && err != unix.ESRCH {
		fail(fmt.Errorf("pidfd of program %d: %w", pid, err))
	}
	// As supervise: no end of the program's stdio stays here, and stderr is the status pipe.
	if null, err := os.Open("/dev/null"); err == nil {
		for fd := range 2 {
			_ = unix.Dup3(int(null.Fd()), fd, 0)
		}
		null.Close()
	}
	_ = unix.Dup3(fdStatus, 2, 0)
	if _, err := io.WriteString(status, "ok\n"); err != nil {
		fail(err)
	}
	if err == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
	}
	sandbox.KillAll()
	_, _ = io.WriteString(status, "ended\n")
	select {}
}

// forkedPid is the forked program's pid in the sandbox, once the supervisor knows it.
var forkedPid atomic.Int64

// waitForkedGone waits, in a supervisor whose worker died, until the forked program it killed is
// gone, and reaps what it left: the sandbox's uid is free only when no process of it remains.
// The program is not the supervisor's child: its parent (the worker, or the host's init once the
// worker died) reaps it, and no event tells that to another process, so it polls. Its children
// become the supervisor's when it exits, so they are reaped after.
func waitForkedGone() {
	pid := int(forkedPid.Load())
	if pid == 0 {
		return
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(2 * time.Millisecond)
	}
	sandbox.KillAll()
}

// zygote is the worker's end of one zygote process.
type zygote struct {
	cmd        *exec.Cmd
	conn       *net.UnixConn
	exited     chan struct{}
	mountPoint string
	forks      atomic.Int64
	broken     atomic.Bool
	ready      chan struct{} // closed once the zygote said ready, or failed to (readyErr)
	readyErr   error

	mu sync.Mutex // one request at a time on conn
}

// usable reports whether z may fork another sandbox.
func (z *zygote) usable() bool {
	select {
	case <-z.exited:
		return false
	default:
	}
	return !z.broken.Load() && z.forks.Load() < zygoteForks
}

// zygoteFor returns the running zygote of prof, starting one if there is none or it is no longer
// usable.
func (p *Provider) zygoteFor(prof sandbox.Profile) (*zygote, error) {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	key := prof.Name + "@" + prof.Digest
	if z := p.zygotes[key]; z != nil {
		if z.usable() {
			return z, nil
		}
		delete(p.zygotes, key)
		if err := z.stop(); err != nil {
			return nil, err
		}
	}
	z, err := p.startZygote(prof)
	if err != nil {
		return nil, err
	}
	p.zygotes[key] = z
	return z, nil
}

// unfork makes prof's sandboxes exec their interpreter from now on: its zygote could not start.
func (p *Provider) unfork(prof sandbox.Profile, err error) {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	key := prof.Name + "@" + prof.Digest
	if z := p.zygotes[key]; z != nil {
		delete(p.zygotes, key)
		if serr := z.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if !p.unforked[key] {
		p.unforked[key] = true
		cmp.Or(p.o.Logger, slog.Default()).Warn("zygote could not start: the profile's sandboxes exec their interpreter", "profile", prof.Name, "err", err)
	}
}

// unforkedProfile reports whether prof's sandboxes exec their interpreter although it has a zygote.
func (p *Provider) unforkedProfile(prof sandbox.Profile) bool {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	return p.unforked[prof.Name+"@"+prof.Digest]
}

// stopZygotes ends every zygote of p.
func (p *Provider) stopZygotes() error {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	var errs []error
	for key, z := range p.zygotes {
		errs = append(errs, z.stop())
		delete(p.zygotes, key)
	}
	return errors.Join(errs...)
}

// startZygote starts a zygote of prof; it is ready for requests once z.ready is closed.
func (p *Provider) startZygote(prof sandbox.Profile) (_ *zygote, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("zygote socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "zygote"), os.NewFile(uintptr(pair[1]), "zygote")
	defer theirs.Close()
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("zygote socket: %w", err)
	}
	z := &zygote{conn: c.(*net.UnixConn), exited: make(chan struct{}), ready: make(chan struct{}),
		mountPoint: filepath.Join(p.o.StateDir, "zygote-"+uuid.NewString()[:8])}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("start zygote of %s: %w", prof.Name, err), z.stop())
		}
	}()
	if err := os.Mkdir(z.mountPoint, 0o700); err != nil {
		return z, err
	}
	filterR, filterW, err := os.Pipe()
	if err != nil {
		return z, err
	}
	defer filterR.Close()
	defer filterW.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return z, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	z.cmd = &exec.Cmd{
		Path:        cmp.Or(p.o.Supervisor, "/proc/self/exe"),
		Args:        []string{zygoteArg},
		Env:         []string{"GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"},
		Dir:         "/",
		Stderr:      os.Stderr, // the worker's log: the zygote writes there only when it fails
		ExtraFiles:  []*os.File{theirs, filterR, cfgR},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS},
	}
	if err := z.cmd.Start(); err != nil {
		close(z.exited)
		close(z.ready)
		return z, err
	}
	go func() {
		_ = z.cmd.Wait()
		close(z.exited)
	}()
	go func() {
		defer close(z.ready)
		_ = z.conn.SetReadDeadline(time.Now().Add(zygoteStartTimeout))
		buf := make([]byte, 64)
		n, err := z.conn.Read(buf)
		if err != nil || string(buf[:n]) != "ready" {
			z.broken.Store(true)
			z.readyErr = fmt.Errorf("zygote of %s (%q, %v): %w", prof.Name, buf[:n], err, errZygoteNotReady)
		}
	}()
	theirs.Close()
	filterR.Close()
	cfgR.Close()
	cfg := initConfig{MountPoint: z.mountPoint, Root: prof.Root, Hide: p.hide, Argv: prof.Zygote, Env: sandbox.BaseEnv(),
		WorkspaceBytes: 16 << 20, TmpBytes: 16 << 20}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		return z, fmt.Errorf("send config: %w", err)
	}
	cfgW.Close()
	if _, err := filterW.Write(p.filter); err != nil {
		return z, fmt.Errorf("send filter: %w", err)
	}
	filterW.Close()
	return z, nil
}

// stop kills the zygote, waits for it, and removes its mount point.
func (z *zygote) stop() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.conn.Close()
	if z.cmd != nil && z.cmd.Process != nil {
		_ = z.cmd.Process.Kill()
		<-z.exited
		<-z.ready
	}
	if err := os.Remove(z.mountPoint); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// forkRequest is what the zygote needs to fork a sandbox's program.
type forkRequest struct {
	uid   int
	fsize int64
	stdio []*os.File // the program's stdin, stdout and stderr
	ns    []*os.File // the namespaces the program enters, as openNamespaces opened them
	cg    cgroup
}

// fork has the zygote fork a program for r and returns its pid, a child of this process.
func (z *zygote) fork(ctx context.Context, r forkRequest) (int, error) {
	files := []*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	mode := "into"
	into, err := r.cg.open()
	if err != nil {
		return 0, err
	}
	cgFiles := []*os.File{into}
	if into == nil {
		mode = "procs"
		if cgFiles, err = r.cg.procs(); err != nil {
			return 0, err
		}
	}
	files = append(files, cgFiles...)
	select {
	case <-z.ready:
		if z.readyErr != nil {
			return 0, z.readyErr
		}
	case <-ctx.Done():
		return 0, fmt.Errorf("wait for zygote: %w", ctx.Err())
	}
	fds := make([]int, 0, len(r.stdio)+len(files))
	for _, f := range append(append(append([]*os.File{}, r.stdio...), r.ns...), files...) {
		fds = append(fds, int(f.Fd()))
	}

	z.mu.Lock()
	defer z.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = z.conn.SetDeadline(deadline)
	req := fmt.Sprintf("fork %d %d %s", r.uid, r.fsize, mode)
	if _, _, err := z.conn.WriteMsgUnix([]byte(req), unix.UnixRights(fds...), nil); err != nil {
		z.broken.Store(true)
		return 0, fmt.Errorf("zygote request: %w: %w", err, errZygoteLost)
	}
	buf := make([]byte, 512)
	n, err := z.conn.Read(buf)
	if err != nil || n == 0 {
		// The zygote took the request: a program may have been forked into the sandbox, so the
		// sandbox is not tried again (not errZygoteLost), and its destruction ends that program.
		z.broken.Store(true)
		return 0, fmt.Errorf("zygote reply: %v: a program may have been forked; the sandbox is given up", cmp.Or(err, io.EOF))
	}
	z.forks.Add(1)
	reply := string(buf[:n])
	if s, ok := strings.CutPrefix(reply, "pid "); ok {
		if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("zygote: %s", reply)
}

// openNamespaces opens the namespaces a forked program enters, of the supervisor pid, in the
// order the zygote takes them: uts, ipc, net, mnt, pid. The cgroup namespace is not among them:
// the supervisor makes its own once in the sandbox's cgroup, and the program makes one the same
// way, rooted at the same cgroup.
func openNamespaces(pid int) ([]*os.File, error) {
	var files []*os.File
	for _, ns := range []string{"uts", "ipc", "net", "mnt", "pid"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open the supervisor's namespaces: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// nsPid is the pid of process pid in its innermost pid namespace.
func nsPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	_, rest, ok := bytes.Cut(b, []byte("\nNSpid:"))
	if !ok {
		return 0, fmt.Errorf("no NSpid in /proc/%d/status", pid)
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty NSpid in /proc/%d/status", pid)
	}
	return strconv.Atoi(f[len(f)-1])
}

// forkProgram has the profile's zygote fork the sandbox's program, with stdio as its standard
// files, and tells the supervisor its pid on cfg. A zygote found dead is started again, once.
func (s *nsSandbox) forkProgram(ctx context.Context, stdio, ns []*os.File, cfg io.WriteCloser) error {
	r := forkRequest{uid: s.uid, fsize: max(cmp.Or(s.shape.WorkspaceBytes, 64<<20), cmp.Or(s.shape.TmpBytes, 64<<20)),
		stdio: stdio, ns: ns, cg: s.cg}
	var pid int
	var lost error
	for range 2 {
		z, err := s.p.zygoteFor(s.shape.Profile)
		if err != nil {
			return err
		}
		if pid, lost = z.fork(ctx, r); lost == nil {
			break
		} else if !errors.Is(lost, errZygoteLost) {
			return lost
		}
	}
	if pid == 0 && errors.Is(lost, errZygoteNotReady) {
		// Two zygotes in a row could not start: this sandbox and the profile's next ones exec
		// their interpreter, as without zygotes.
		s.p.unfork(s.shape.Profile, lost)
		s.forked = false
		if _, err := io.WriteString(cfg, "0\n"); err != nil {
			return fmt.Errorf("tell the supervisor to exec: %w", err)
		}
		return cfg.Close()
	}
	if pid == 0 {
		return fmt.Errorf("fork program: %w", lost)
	}
	// The program is this process's child: no one else reaps it, so its pid names it until
	// the wait below.
	nspid, err := nsPid(pid)
	prog, ferr := os.FindProcess(pid)
	if ferr != nil {
		return errors.Join(err, ferr)
	}
	s.progDone = make(chan struct{})
	go func() {
		if st, err := prog.Wait(); err == nil {
			s.progWS, _ = st.Sys().(syscall.WaitStatus)
		}
		close(s.progDone)
	}()
	if err != nil {
		_ = prog.Kill()
		return err
	}
	if _, err := fmt.Fprintf(cfg, "%d\n", nspid); err != nil {
		return fmt.Errorf("send program pid: %w", err)
	}
	return cfg.Close()
}
