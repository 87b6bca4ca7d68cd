// Package namespace runs each job in fresh Linux namespaces made directly with the kernel: new
// mount, pid, net, ipc, uts and cgroup namespaces, a read-only root, private tmpfs /workspace and
// /tmp, an unprivileged uid unique on the host while the sandbox lives, no capabilities,
// no_new_privs, the seccomp policy of package sandbox, rlimits, and a cgroup (v1 or v2) that caps
// memory, pids and CPU.
//
// A sandbox's first process is this program re-executed as a supervisor (see [Init]): pid 1 of
// the sandbox's pid namespace, it builds the root and starts the profile's interpreter under the
// sandbox uid. It never changes its own credentials, and it exits when the program ends or the
// worker is gone (its lifeline pipe reaches EOF); then the kernel kills every process of the
// namespace. So a sandbox outlives its worker by no more than the time the kernel takes to close
// a dead process's files.
//
// A profile with a zygote (python3, python3-data) does not exec its interpreter per sandbox: the
// supervisor builds the sandbox as above, and the program is forked from an interpreter that did
// the profile's imports once and never runs a job; the forked program enters the sandbox's
// namespaces, cgroup, uid, limits and filter before its bootstrap reads a byte. Its parent is the
// worker, outside the sandbox's pid namespace (getppid() is 0). See zygote.go for the steps and
// for what a forked program shares with its zygote; [Options.NoZygote] turns zygotes off.
//
// Uids are taken under a lock per uid (flock on a file in UIDLockDir), so worker processes on one
// host never share one; the supervisor holds the lock too, so a uid is free again only when no
// process of its sandbox remains: the worker releases it once the supervisor was reaped (pid 1's
// exit completes only when its namespace is empty), and a supervisor whose worker died kills and
// reaps every process of its namespace before it exits. A Destroy that fails is retried by
// [Provider.Reap].
package namespace

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/runfleet/runfleet/fleet/internal/sandbox/uidlock"
)

// Options configure a [Provider]. Zero fields take the defaults named.
type Options struct {
	CgroupRoot  string // default /sys/fs/cgroup
	CgroupName  string // parent cgroup of the sandboxes; default "runfleet"
	StateDir    string // mount points; default $TMPDIR/runfleet-namespace
	UIDBase     int    // first sandbox uid; default 200000
	UIDs        int    // distinct uids, so the most sandboxes at once on the host; default 1024
	UIDLockDir  string // one lock file per uid, shared by every worker of the host; default /run/runfleet/uids
	EtcDir      string // passwd, group, subuid and subgid, checked against the uid range; default /etc
	DispatchLog sandbox.DispatchLog
	// Supervisor is the executable each sandbox starts as its supervisor: a program whose main
	// calls [Init] first, such as the small static one of internal/cmd/sandboxinit, kept where
	// only root writes (supervise.PrivateCopy). Default: this process's own executable,
	// re-executed, which costs a large binary's start-up in every sandbox.
	Supervisor string
	// NoZygote starts every sandbox's interpreter by exec, also for profiles that have a zygote
	// (see zygote.go).
	NoZygote bool
	// Logger says when a profile's zygote could not start and its sandboxes exec their
	// interpreter instead; default slog.Default().
	Logger *slog.Logger
}

// Provider makes namespace sandboxes.
type Provider struct {
	o      Options
	cg     cgroups
	filter []byte   // the seccomp program, encoded
	hide   []string // host paths masked in the default root

	mu     sync.Mutex
	uids   *uidlock.Range
	failed map[*nsSandbox]bool

	zmu      sync.Mutex
	zygotes  map[string]*zygote // by profile name and digest
	unforked map[string]bool    // profiles whose zygote could not start: their sandboxes exec

	// Reaped is how many parent cgroups of dead workers New removed.
	Reaped int
}

var _ sandbox.Provider = (*Provider)(nil)

// New checks that this host lets it enforce every limit and returns a provider. The error wraps
// [sandbox.ErrUnsupported] when a limit cannot be enforced.
func New(o Options) (*Provider, error) {
	o.CgroupRoot = cmp.Or(o.CgroupRoot, "/sys/fs/cgroup")
	o.CgroupName = cmp.Or(o.CgroupName, "runfleet")
	o.StateDir = cmp.Or(o.StateDir, filepath.Join(os.TempDir(), "runfleet-namespace"))
	o.UIDBase = cmp.Or(o.UIDBase, uidlock.DefaultBase)
	o.UIDs = cmp.Or(o.UIDs, uidlock.DefaultN)
	o.UIDLockDir = cmp.Or(o.UIDLockDir, uidlock.DefaultDir)
	o.EtcDir = cmp.Or(o.EtcDir, "/etc")
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("namespace provider needs root (to make cgroups and switch to sandbox uids): %w", sandbox.ErrUnsupported)
	}
	// A descriptor the worker was started with (a shell's redirection, a process manager's
	// socket or tty) would pass to every supervisor, and from it to the program.
	closeOnExecFrom(3)
	if err := checkIDRange(o.EtcDir, o.UIDBase, o.UIDs); err != nil {
		return nil, err
	}
	for _, d := range []string{o.StateDir, o.UIDLockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		if err := checkStateDir(d); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	filter, err := filterProgram()
	if err != nil {
		return nil, err
	}
	top, err := detectCgroups(o.CgroupRoot, o.CgroupName)
	if err != nil {
		return nil, err
	}
	reaped, err := reapDead(top.dirs())
	if err != nil {
		return nil, fmt.Errorf("reap cgroups of dead workers: %w", err)
	}
	cg, err := detectCgroups(o.CgroupRoot, filepath.Join(o.CgroupName, instanceDir(os.Getpid(), instances.Add(1))))
	if err != nil {
		return nil, err
	}
	probe, err := cg.create("probe-"+uuid.NewString()[:8], limits{memory: 64 << 20, pids: 8, cpus: 1})
	if err != nil {
		return nil, fmt.Errorf("cgroup %s limits: %w: %w", cg.version(), err, sandbox.ErrUnsupported)
	}
	// Limits change when a waiting sandbox is assigned: up and down.
	for _, l := range []limits{{memory: 128 << 20, pids: 16, cpus: 0.5}, {memory: 32 << 20, pids: 8}} {
		if err := probe.set(l); err != nil {
			_ = probe.remove()
			return nil, fmt.Errorf("cgroup %s limits at assignment: %w: %w", cg.version(), err, sandbox.ErrUnsupported)
		}
	}
	if err := probe.remove(); err != nil {
		return nil, err
	}
	if !o.NoZygote && !clone3Allowed() {
		// A zygote forks with clone3 (CLONE_PARENT, CLONE_INTO_CGROUP): under a filter that
		// answers it ENOSYS, every fork would fail, and with it every sandbox of its profiles.
		cmp.Or(o.Logger, slog.Default()).Warn("clone3 is not allowed here (a seccomp profile around the worker): sandboxes exec their interpreter, without zygotes")
		o.NoZygote = true
	}
	hide := []string{"/usr/local"}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			hide = append(hide, exe)
		}
	}
	return &Provider{o: o, cg: cg, filter: filter, hide: hide, uids: uidlock.New(o.UIDBase, o.UIDs, o.UIDLockDir),
		failed: map[*nsSandbox]bool{}, zygotes: map[string]*zygote{}, unforked: map[string]bool{}, Reaped: reaped}, nil
}

// instances numbers the providers of this process, so each has its own parent cgroup.
var instances atomic.Int64

// Close retries the destroys that failed, then removes this provider's parent cgroups.
func (p *Provider) Close() error {
	_, err := p.Reap(context.Background())
	errs := []error{err, p.stopZygotes()}
	for _, d := range p.cg.dirs() {
		errs = append(errs, removeTree(d))
	}
	return errors.Join(errs...)
}

// Reap retries every Destroy that failed, and returns how many sandboxes it finished removing.
// The worker calls it periodically.
func (p *Provider) Reap(ctx context.Context) (int, error) {
	p.mu.Lock()
	failed := make([]*nsSandbox, 0, len(p.failed))
	for s := range p.failed {
		failed = append(failed, s)
	}
	p.mu.Unlock()
	n := 0
	var errs []error
	for _, s := range failed {
		if err := s.Destroy(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Name is "namespace".
func (p *Provider) Name() string { return "namespace" }

// CgroupVersion says which cgroup hierarchy enforces the limits.
func (p *Provider) CgroupVersion() string { return p.cg.version() }

// cloneFlags are the supervisor's namespaces; it makes its cgroup namespace itself, once it is in
// the sandbox's cgroup.
const cloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// Create starts a sandbox whose interpreter waits on stdin, under shape's limits until Assign.
func (p *Provider) Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error) {
	if len(shape.Profile.Interpreter) == 0 {
		return nil, fmt.Errorf("profile %s: no interpreter", shape.Profile.Name)
	}
	s := &nsSandbox{p: p, id: "ns-" + uuid.NewString(), shape: shape, exited: make(chan struct{}),
		forked: !p.o.NoZygote && len(shape.Profile.Zygote) > 0 && !p.unforkedProfile(shape.Profile)}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("create sandbox: %w", err), s.Destroy(context.WithoutCancel(ctx)))
	}
	return s, nil
}

type nsSandbox struct {
	p     *Provider
	id    string
	shape sandbox.Shape
	use   sandbox.Use

	mu         sync.Mutex // Destroy against the reaper's retry
	uid        int
	cg         cgroup
	mountPoint string
	cmd        *exec.Cmd
	stdin      *os.File
	stdout     *os.File
	stderr     *os.File
	status     *bufio.Reader // the supervisor's reports
	statusFile *os.File
	lifeline   *os.File      // write end; closing it ends the sandbox
	exited     chan struct{} // closed when cmd was reaped, if it was started
	started    bool
	destroyed  bool
	held       atomic.Bool // the supervisor reported the program's end and keeps /workspace

	forked   bool          // the program is forked by the profile's zygote, a child of this process
	progDone chan struct{} // closed when the forked program was reaped; progWS is its status
	progWS   syscall.WaitStatus
}

func (s *nsSandbox) ID() string { return s.id }

func (s *nsSandbox) start(ctx context.Context) error {
	uid, lock, err := s.p.uids.Take()
	if err != nil {
		return err
	}
	s.uid = uid
	if s.cg, err = s.p.cg.create(s.id, cgroupLimits(s.shape.Limits)); err != nil {
		return err
	}
	s.mountPoint = filepath.Join(s.p.o.StateDir, s.id)
	if err := os.Mkdir(s.mountPoint, 0o700); err != nil {
		return err
	}
	var pipes [6][2]*os.File // stdin, stdout, stderr, config, status, lifeline: {read, write}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	child := []*os.File{pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][0], pipes[4][1], pipes[5][0]}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	s.stdin, s.stdout, s.stderr = pipes[0][1], pipes[1][0], pipes[2][0]
	s.statusFile, s.lifeline = pipes[4][0], pipes[5][1]
	s.status = bufio.NewReader(s.statusFile)
	cfgW := pipes[3][1]
	defer cfgW.Close()

	s.cmd = &exec.Cmd{
		Path: cmp.Or(s.p.o.Supervisor, "/proc/self/exe"),
		Args: []string{initArg},
		// GORACE: a race-enabled build (tests) would otherwise sleep a second in every exit.
		Env:        []string{"GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0"},
		Dir:        "/",
		Stdin:      pipes[0][0],
		Stdout:     pipes[1][1],
		Stderr:     pipes[2][1],
		ExtraFiles: []*os.File{pipes[3][0], pipes[4][1], pipes[5][0], lock},
		// No Pdeathsig: it fires when the worker's thread that forked exits, not the worker; the
		// lifeline pipe ends the sandbox when the worker is gone.
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: cloneFlags},
	}
	into, err := s.cg.open()
	if err != nil {
		return err
	}
	if into != nil {
		defer into.Close()
		s.cmd.SysProcAttr.UseCgroupFD, s.cmd.SysProcAttr.CgroupFD = true, int(into.Fd())
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	s.started = true
	// Opened now, while the supervisor waits on its config: once it is not dumpable, only a
	// worker with CAP_SYS_PTRACE could (a pod's has not). And before the wait below reaps it: until
	// then its pid cannot name another process (another tenant's sandbox started since).
	var ns []*os.File
	var nsErr error
	if s.forked {
		ns, nsErr = openNamespaces(s.cmd.Process.Pid)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	stdio := []*os.File{pipes[0][0], pipes[1][1], pipes[2][1]}
	for _, f := range child[len(stdio):] {
		f.Close()
	}
	if s.forked {
		child = stdio // the zygote's child gets them
		if nsErr != nil {
			return nsErr
		}
		defer func() {
			for _, f := range ns {
				f.Close()
			}
		}()
	} else {
		for _, f := range stdio {
			f.Close()
		}
		child = nil
	}
	// The supervisor blocks on its config until it is in the cgroup, so nothing escapes the limits.
	if into == nil {
		if err := s.cg.add(s.cmd.Process.Pid); err != nil {
			return err
		}
	}
	cfg := initConfig{
		MountPoint:     s.mountPoint,
		Root:           s.shape.Profile.Root,
		Hide:           s.p.hide,
		UID:            s.uid,
		Argv:           s.shape.Profile.Interpreter,
		Env:            sandbox.BaseEnv(),
		WorkspaceBytes: cmp.Or(s.shape.WorkspaceBytes, 64<<20),
		TmpBytes:       cmp.Or(s.shape.TmpBytes, 64<<20),
		Filter:         s.p.filter,
		Forked:         s.forked,
	}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		return fmt.Errorf("send supervisor config: %w", err)
	}
	if !s.forked {
		cfgW.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.statusFile.SetReadDeadline(deadline)
	defer s.statusFile.SetReadDeadline(time.Time{})
	// The status pipe carries "ok" once the program runs, or the supervisor's error.
	line, err := s.status.ReadString('\n')
	if line == "enter\n" && s.forked {
		ferr := s.forkProgram(ctx, child, ns, cfgW)
		for _, f := range child {
			f.Close()
		}
		child = nil
		if ferr != nil {
			return ferr
		}
		// The wait for the zygote's imports is bounded by ctx alone: the rest has its own time.
		deadline = time.Now().Add(10 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = s.statusFile.SetReadDeadline(deadline)
		line, err = s.status.ReadString('\n')
	}
	if line == "ok\n" {
		return s.ready(deadline)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("wait for supervisor: %w", err)
	}
	return fmt.Errorf("supervisor: %s", strings.TrimSpace(line))
}

// ready reads the profile's ready line from the program's stdout, if it has one: then the
// interpreter has started and waits on stdin.
func (s *nsSandbox) ready(deadline time.Time) error {
	if s.shape.Profile.Ready == "" {
		return nil
	}
	_ = s.stdout.SetReadDeadline(deadline)
	defer s.stdout.SetReadDeadline(time.Time{})
	got := make([]byte, len(s.shape.Profile.Ready))
	if n, err := io.ReadFull(s.stdout, got); err != nil {
		return fmt.Errorf("bootstrap not ready (stdout %q): %w", got[:n], err)
	}
	if string(got) != s.shape.Profile.Ready {
		return fmt.Errorf("bootstrap not ready: stdout %q", got)
	}
	return nil
}

func (s *nsSandbox) kill() {
	if s.started {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// cgroupLimits are a sandbox's cgroup limits for l: the supervisor's share on top.
func cgroupLimits(l sandbox.Limits) limits {
	return limits{memory: l.MemoryBytes + sandbox.SupervisorMemory, pids: l.Pids + sandbox.SupervisorTasks, cpus: l.CPUs}
}

// Assign applies the job's limits to the sandbox's cgroup.
func (s *nsSandbox) Assign(ctx context.Context, job sandbox.Job) error {
	if err := s.use.Assign(job); err != nil {
		return err
	}
	select {
	case <-s.exited:
		return fmt.Errorf("assign %s: %w", s.id, sandbox.ErrEnded)
	default:
	}
	// The supervisor writes nothing more before the program ends: a report waiting (or the
	// pipe's end) means the interpreter died while it waited.
	if s.statusWaiting() {
		return fmt.Errorf("assign %s: program ended: %w", s.id, sandbox.ErrEnded)
	}
	s.cg.mark()
	if cgroupLimits(job.Limits) == cgroupLimits(s.shape.Limits) {
		return nil // the job's limits are those the sandbox waits under (the defaults)
	}
	if err := s.cg.set(cgroupLimits(job.Limits)); err != nil {
		return fmt.Errorf("assign %s: %w", s.id, err)
	}
	return nil
}

// statusWaiting says whether the status pipe can be read without waiting.
func (s *nsSandbox) statusWaiting() bool {
	if s.status.Buffered() > 0 {
		return true
	}
	rc, err := s.statusFile.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0 && fds[0].Revents != 0
	})
	return ready
}

func (s *nsSandbox) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (sandbox.Exit, error) {
	var exit sandbox.Exit
	job, err := s.use.Start()
	if err != nil {
		return exit, err
	}
	if err := s.p.o.DispatchLog.Record(job, s.id); err != nil {
		return exit, err
	}
	start := time.Now()
	guard := sandbox.Watch(ctx, job.Limits.Timeout, s.endProgram)
	defer guard.Stop()

	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(s.stdin, stdin)
		s.stdin.Close()
	})
	copyOut := func(dst io.Writer, src *os.File) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					guard.Kill()
					_, _ = io.Copy(io.Discard, src)
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() { copyOut(stdout, s.stdout) })
	wg.Go(func() { copyOut(stderr, s.stderr) })
	// The supervisor reports the program's status once no process of it is left, and stays; a
	// supervisor killed by the guard reports none, and its own status stands.
	var ws syscall.WaitStatus
	line, err := s.status.ReadString('\n')
	if line == "ended\n" && s.progDone != nil {
		<-s.progDone // it ended before the supervisor said so; its parent is this process
		line = fmt.Sprintf("exit %d\n", uint32(s.progWS))
	}
	n, perr := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "exit "), 10, 32)
	reported := err == nil && perr == nil
	if reported {
		s.held.Store(true)
		ws = syscall.WaitStatus(n)
	} else {
		<-s.exited
		ws, _ = s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	wg.Wait()
	exit.Usage.Wall = time.Since(start)

	if ws.Signaled() {
		exit.Signal = unix.SignalName(ws.Signal())
		exit.Code = 128 + int(ws.Signal())
	} else {
		exit.Code = ws.ExitStatus()
	}
	st := s.cg.stats()
	exit.OOM, exit.Usage.CPU, exit.Usage.MaxRSS = st.OOM, st.CPU, st.Peak
	guard.Mark(&exit)
	if !reported && !exit.OOM && !exit.Killed && !exit.TimedOut {
		// The supervisor reports every program's end before anything else; one that ended
		// without that report crashed or was killed from outside: the program's outcome is lost.
		said, _ := io.ReadAll(io.LimitReader(s.status, 2<<10))
		return exit, fmt.Errorf("sandbox %s: supervisor ended (exit %d) without the program's status (it said %q): %w",
			s.id, exit.Code, strings.TrimSpace(line+string(said)), errSupervisorLost)
	}
	return exit, nil
}

// errSupervisorLost is a supervisor that ended before it reported the program's end.
var errSupervisorLost = errors.New("sandbox supervisor lost")

// Destroy kills every process of the sandbox and removes its cgroup and mount point. When it
// fails, the provider keeps the sandbox and [Provider.Reap] tries again.
func (s *nsSandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return nil
	}
	if err := s.destroy(ctx); err != nil {
		s.p.mu.Lock()
		s.p.failed[s] = true
		s.p.mu.Unlock()
		return fmt.Errorf("destroy %s: %w", s.id, err)
	}
	s.destroyed = true
	s.p.mu.Lock()
	delete(s.p.failed, s)
	s.p.mu.Unlock()
	return nil
}

func (s *nsSandbox) destroy(ctx context.Context) error {
	if s.started {
		s.kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.progDone != nil {
		// The supervisor's end, pid 1's, killed it.
		select {
		case <-s.progDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, f := range []*os.File{s.stdin, s.stdout, s.stderr, s.statusFile, s.lifeline} {
		if f != nil {
			f.Close()
		}
	}
	var errs []error
	if s.cg != nil {
		if err := s.cg.kill(); err != nil {
			return err // a process of the uid may live: the uid stays taken
		}
	}
	// No process of the sandbox is left: its uid may serve another.
	if s.uid != 0 {
		s.p.uids.Release(s.uid)
		s.uid = 0
	}
	if s.cg != nil {
		errs = append(errs, s.cg.remove())
	}
	if s.mountPoint != "" {
		if err := os.Remove(s.mountPoint); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
