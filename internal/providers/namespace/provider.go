// Package namespace runs each job in fresh Linux namespaces made directly with the kernel: new
// mount, pid, net, ipc, uts and cgroup namespaces, a read-only root, private tmpfs /workspace and
// /tmp, a distinct unprivileged uid per concurrent sandbox, no capabilities, no_new_privs, a
// seccomp filter, rlimits, and a cgroup (v1 or v2) that caps memory, pids and CPU.
//
// A sandbox's first process is this program re-executed (see [Init]); it builds the root, drops
// every privilege and execs the profile's interpreter, which becomes pid 1 of the sandbox, so that
// when it ends the kernel kills every process it left behind.
package namespace

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/sandbox"
)

// Options configure a [Provider]. Zero fields take the defaults named.
type Options struct {
	CgroupRoot  string // default /sys/fs/cgroup
	CgroupName  string // parent cgroup of the sandboxes; default "runfleet"
	StateDir    string // mount points; default $TMPDIR/runfleet-namespace
	UIDBase     int    // first sandbox uid; default 200000
	UIDs        int    // distinct uids, so the most sandboxes at once; default 1024
	DispatchLog sandbox.DispatchLog
}

// Provider makes namespace sandboxes.
type Provider struct {
	o  Options
	cg cgroups

	mu   sync.Mutex
	uids map[int]bool // in use

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
	o.UIDBase = cmp.Or(o.UIDBase, 200000)
	o.UIDs = cmp.Or(o.UIDs, 1024)
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("namespace provider needs root (to make cgroups and switch to sandbox uids): %w", sandbox.ErrUnsupported)
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
	if err := probe.remove(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Provider{o: o, cg: cg, uids: map[int]bool{}, Reaped: reaped}, nil
}

// instances numbers the providers of this process, so each has its own parent cgroup.
var instances atomic.Int64

// Close removes this provider's parent cgroups. Sandboxes must be destroyed first.
func (p *Provider) Close() error {
	var errs []error
	for _, d := range p.cg.dirs() {
		errs = append(errs, removeTree(d))
	}
	return errors.Join(errs...)
}

// Name is "namespace".
func (p *Provider) Name() string { return "namespace" }

// CgroupVersion says which cgroup hierarchy enforces the limits.
func (p *Provider) CgroupVersion() string { return p.cg.version() }

func (p *Provider) takeUID() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.o.UIDs {
		uid := p.o.UIDBase + i
		if !p.uids[uid] {
			p.uids[uid] = true
			return uid, nil
		}
	}
	return 0, fmt.Errorf("all %d sandbox uids in use", p.o.UIDs)
}

func (p *Provider) releaseUID(uid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.uids, uid)
}

const cloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP

// Create starts a sandbox whose interpreter waits on stdin.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if len(spec.Profile.Interpreter) == 0 {
		return nil, fmt.Errorf("profile %s: no interpreter", spec.Profile.Name)
	}
	s := &nsSandbox{p: p, id: "ns-" + uuid.NewString(), spec: spec, exited: make(chan struct{})}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("create sandbox: %w", err), s.Destroy(context.WithoutCancel(ctx)))
	}
	return s, nil
}

type nsSandbox struct {
	p    *Provider
	id   string
	spec sandbox.Spec

	uid        int
	cg         cgroup
	mountPoint string
	cmd        *exec.Cmd
	stdin      *os.File
	stdout     *os.File
	stderr     *os.File
	exited     chan struct{} // closed when cmd was reaped, if it was started
	started    bool
	destroyed  bool
}

func (s *nsSandbox) ID() string { return s.id }

func (s *nsSandbox) start(ctx context.Context) error {
	var err error
	if s.uid, err = s.p.takeUID(); err != nil {
		return err
	}
	if s.cg, err = s.p.cg.create(s.id, limits{memory: s.spec.MemoryBytes, pids: s.spec.Pids, cpus: s.spec.CPUs}); err != nil {
		return err
	}
	s.mountPoint = filepath.Join(s.p.o.StateDir, s.id)
	if err := os.Mkdir(s.mountPoint, 0o700); err != nil {
		return err
	}
	var pipes [5][2]*os.File // stdin, stdout, stderr, config, status: {read, write}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	child := []*os.File{pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][0], pipes[4][1]}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	s.stdin, s.stdout, s.stderr = pipes[0][1], pipes[1][0], pipes[2][0]
	cfgW, statusR := pipes[3][1], pipes[4][0]
	defer cfgW.Close()
	defer statusR.Close()

	s.cmd = &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{initArg},
		Env:        []string{},
		Dir:        "/",
		Stdin:      pipes[0][0],
		Stdout:     pipes[1][1],
		Stderr:     pipes[2][1],
		ExtraFiles: []*os.File{pipes[3][0], pipes[4][1]},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: cloneFlags,
			Pdeathsig:  syscall.SIGKILL, // a crashed worker leaves no sandbox running
		},
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start init: %w", err)
	}
	s.started = true
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	for _, f := range child {
		f.Close()
	}
	child = nil
	// The init blocks on its config until it is in the cgroup, so nothing it starts escapes the limits.
	if err := s.cg.add(s.cmd.Process.Pid); err != nil {
		return err
	}
	cfg := initConfig{
		MountPoint:     s.mountPoint,
		Root:           s.spec.Profile.Root,
		UID:            s.uid,
		Argv:           s.spec.Profile.Interpreter,
		Env:            sandbox.BaseEnv(),
		WorkspaceBytes: cmp.Or(s.spec.WorkspaceBytes, 64<<20),
		TmpBytes:       cmp.Or(s.spec.TmpBytes, 64<<20),
	}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		return fmt.Errorf("send init config: %w", err)
	}
	cfgW.Close()
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = statusR.SetReadDeadline(deadline)
	// The status pipe closes on exec (success) or carries the init's error.
	msg, err := io.ReadAll(statusR)
	if err != nil {
		return fmt.Errorf("wait for init: %w", err)
	}
	if len(msg) > 0 {
		return fmt.Errorf("init: %s", bytes.TrimSpace(msg))
	}
	return nil
}

func (s *nsSandbox) kill() {
	if s.started {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
	}
}

func (s *nsSandbox) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (sandbox.Exit, error) {
	var exit sandbox.Exit
	if err := s.p.o.DispatchLog.Record(s.spec, s.id); err != nil {
		return exit, err
	}
	start := time.Now()
	guard := sandbox.Watch(ctx, s.spec.Timeout, s.kill)
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
	<-s.exited
	wg.Wait()
	exit.Usage.Wall = time.Since(start)

	ws, _ := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		exit.Signal = unix.SignalName(ws.Signal())
		exit.Code = 128 + int(ws.Signal())
	} else {
		exit.Code = ws.ExitStatus()
	}
	st := s.cg.stats()
	exit.OOM, exit.Usage.CPU, exit.Usage.MaxRSS = st.oom, st.cpu, st.maxRSS
	guard.Mark(&exit)
	return exit, nil
}

// Destroy kills every process of the sandbox and removes its cgroup and mount point.
func (s *nsSandbox) Destroy(ctx context.Context) error {
	if s.destroyed {
		return nil
	}
	var errs []error
	if s.started {
		s.kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
			return fmt.Errorf("destroy %s: %w", s.id, ctx.Err())
		}
	}
	for _, f := range []*os.File{s.stdin, s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if s.cg != nil {
		errs = append(errs, s.cg.kill(), s.cg.remove())
	}
	if s.mountPoint != "" {
		if err := os.Remove(s.mountPoint); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy %s: %w", s.id, err)
	}
	if s.uid != 0 {
		s.p.releaseUID(s.uid)
	}
	s.destroyed = true
	return nil
}
