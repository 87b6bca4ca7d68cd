// Package docker runs each job in a fresh Docker container, never reused: network mode none, all
// capabilities dropped, no-new-privileges, the seccomp policy of package sandbox, a read-only
// root, size-limited tmpfs /workspace and /tmp, memory equal to memory+swap, a pids limit, a CPU
// quota, the program under a uid of its own on the host (package uidlock: no other sandbox of
// any worker shares its per-uid kernel limits), and no log kept. It attaches before start, so the payload
// travels on the container's stdin and output is demultiplexed into pages as it comes.
//
// The container's pid 1 is the worker's own executable, static, bind-mounted read-only and run as
// root with only the capabilities it needs, a uid the program cannot signal (see [Init]): it
// ends the container when the worker's attach connection closes, so a container never outlives
// its worker by more than the daemon takes to pass that on. When the program ends, the init kills
// what it left, ends the output with a marker only the worker knows and holds the container, so
// that its tmpfs /workspace can be read (see [sandbox.FileReader]) until Destroy. The worker
// keeps the attach open for the whole run and frames stdin, so that the program's end of input
// is not mistaken for the worker's end.
//
// Each container lives in a cgroup of its own parent (cgroupfs driver, v1 or v2): Docker removes
// the container's cgroup when it exits, and the parent's hierarchical counters give its CPU time
// and peak memory after that. Under the systemd driver only wall time is measured.
package docker

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/sandbox/uidlock"
	"github.com/runfleet/runfleet/fleet/internal/supervise"
)

// Labels put on every container.
const (
	LabelFleet  = "dev.runfleet.fleet"
	LabelWorker = "dev.runfleet.worker"
	// LabelDeadline is the latest time, in Unix seconds, the container may still be alive: its
	// creation plus its worker's [Options.Lifetime]. Every worker's reaper honours it, whatever
	// its own settings.
	LabelDeadline = "dev.runfleet.deadline"
)

// DefaultLifetime is the default [Options.Lifetime].
const DefaultLifetime = time.Hour

// Options configure a [Provider].
type Options struct {
	Fleet  string // label value that marks this fleet's containers; default "runfleet"
	Worker string // label value that marks this worker's containers
	// The program runs under a uid of its own, uid and gid alike, taken from UIDs uids from
	// UIDBase under a lock in UIDLockDir (package uidlock), shared with every worker and provider
	// of the host; defaults uidlock.DefaultBase, DefaultN and DefaultDir.
	UIDBase    int
	UIDs       int
	UIDLockDir string
	InitBinary string        // host path of the container init, a static executable; default this process's
	StateDir   string        // where the init's execute-only copy is kept, owned by root; default DefaultStateDir
	KillWait   time.Duration // after a kill, how long Run waits for the daemon to confirm it; default 15s
	// Lifetime bounds a container's life: its longest wait in a pool, plus the largest timeout
	// a job may have, plus a margin for the kill and the collection of its files. Default
	// [DefaultLifetime].
	Lifetime   time.Duration
	CgroupRoot string // where the host mounts cgroups; default /sys/fs/cgroup
	// Runtime is the OCI runtime dockerd runs the containers with, by the name its configuration
	// gives it ("runsc" for gVisor, see package gvisor); default dockerd's own (runc).
	Runtime     string
	Traits      RuntimeTraits // how Runtime differs from runc; zero for runc
	DispatchLog sandbox.DispatchLog
	Logger      *slog.Logger
}

// Bounds on calls to the daemon that a kill or a removal waits for: a hung daemon cannot hang a
// worker's kill forever.
const (
	killTimeout     = 10 * time.Second
	defaultKillWait = 15 * time.Second
	readyTimeout    = 30 * time.Second // a bootstrap's start on a loaded host
)

// RuntimeTraits are how an OCI runtime differs from runc in what the provider relies on (package
// gvisor sets them for runsc).
type RuntimeTraits struct {
	// Tasks and Memory are what the runtime itself holds in a container's cgroup beside the job
	// (gVisor's Sentry, gofer and stub processes), added to the job's limits, and TasksPerPid
	// its host tasks for each of the job's (a ptrace stub and its threads per process).
	Tasks, TasksPerPid, Memory int64
	// NprocFromShape bounds the program's processes by RLIMIT_NPROC at the shape's pids, set at
	// Create and lowered at Assign to a job's lower pids, for a runtime whose cgroup counts its
	// own threads too: gVisor's Sentry enforces the limit for the sandbox user, whose processes
	// there are only the job's. A job asking for more than the shape gets the shape's. The
	// limit is one below the pids: runsc counts a task under the uid that made it, and the
	// program was made by the init, as root, before it switched to its user.
	NprocFromShape bool
	// NoUpdate is a runtime without an update command: Assign writes the job's limits into the
	// container's cgroup itself (cgroupfs driver).
	NoUpdate bool
	// ExecNeedsRead is a runtime that reads a file to execute it (gVisor's Sentry loads the ELF
	// itself): the collector, which the sandbox user may only execute, starts as root and
	// switches to the sandbox user before it reads the workspace.
	ExecNeedsRead bool
	// SeccompEPERMOnly is a runtime whose seccomp answers every errno rule with EPERM (runsc's
	// OCI seccomp, applied by its Sentry): see seccompProfile.
	SeccompEPERMOnly bool
}

// Provider makes container sandboxes.
type Provider struct {
	c   *client.Client
	o   Options
	log *slog.Logger

	seccomp  string         // profile JSON
	uids     *uidlock.Range // of the sandbox users, each the owner of its /workspace
	init     string         // host path of the init binary
	initStat fs.FileInfo    // of init when its content was verified
	cg       cgroupLayout

	mu   sync.Mutex
	live map[string]string // id → sandbox name of the containers this provider made and no Destroy was asked for

	// Removals of containers whose program has ended run off the job's path (see Destroy); Close
	// waits for them.
	removals   sync.WaitGroup
	removing   chan struct{}   // bounds removals at once, so that they leave the daemon to creations
	pendingIDs map[string]bool // guarded by mu: the reaper leaves them to their removal
	pending    atomic.Int64
	removeHook func() // tests: called before each removal
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the Docker daemon named by the environment (DOCKER_HOST, or the default socket),
// negotiating the API version down to the daemon's.
func New(ctx context.Context, o Options) (*Provider, error) {
	o.Fleet = cmp.Or(o.Fleet, "runfleet")
	o.UIDBase = cmp.Or(o.UIDBase, uidlock.DefaultBase)
	o.UIDs = cmp.Or(o.UIDs, uidlock.DefaultN)
	o.UIDLockDir = cmp.Or(o.UIDLockDir, uidlock.DefaultDir)
	sc, err := seccompProfile(o.Traits.SeccompEPERMOnly)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	if err := os.MkdirAll(o.UIDLockDir, 0o700); err != nil {
		return nil, fmt.Errorf("uid locks: %w", err)
	}
	initBin := o.InitBinary
	if initBin == "" {
		if initBin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("container init: %w", err)
		}
	}
	if err := checkStatic(initBin); err != nil {
		return nil, fmt.Errorf("container init: %w", err)
	}
	if initBin, err = supervise.PrivateCopyFile(initBin, cmp.Or(o.StateDir, DefaultStateDir)); err != nil {
		return nil, fmt.Errorf("container init: %w", err)
	}
	initStat, err := os.Lstat(initBin)
	if err != nil {
		return nil, fmt.Errorf("container init: %w", err)
	}
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		c.Close()
		return nil, fmt.Errorf("docker daemon unreachable (is dockerd running and the socket mounted?): %w", err)
	}
	info, err := c.Info(ctx, client.InfoOptions{})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("docker info: %w", err)
	}
	if _, ok := info.Info.Runtimes[o.Runtime]; o.Runtime != "" && !ok {
		c.Close()
		return nil, fmt.Errorf("docker daemon has no runtime %q (its configuration, /etc/docker/daemon.json, names it: scripts/setup registers runsc)", o.Runtime)
	}
	p := &Provider{c: c, o: o, log: cmp.Or(o.Logger, slog.Default()), live: map[string]string{}, removing: make(chan struct{}, maxRemovals), pendingIDs: map[string]bool{},
		seccomp: sc, uids: uidlock.New(o.UIDBase, o.UIDs, o.UIDLockDir), init: initBin, initStat: initStat,
		cg: newCgroupLayout(cmp.Or(o.CgroupRoot, "/sys/fs/cgroup"), info.Info.CgroupDriver, info.Info.CgroupVersion, o.Fleet)}
	if !p.cg.measures() {
		p.log.Warn("docker cgroup driver is not cgroupfs: sandboxes report wall time only", "driver", info.Info.CgroupDriver)
	}
	return p, nil
}

// Ready reports whether the daemon answers.
func (p *Provider) Ready(ctx context.Context) error {
	_, err := p.c.Ping(ctx, client.PingOptions{})
	return err
}

// Close waits for the removals Destroy left running, then releases the client.
func (p *Provider) Close() error {
	p.removals.Wait()
	return p.c.Close()
}

// PendingRemovals returns how many containers whose Destroy returned are not removed yet.
func (p *Provider) PendingRemovals() int { return int(p.pending.Load()) }

// WaitRemovals returns once no removal is pending, or with ctx's error.
func (p *Provider) WaitRemovals(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for p.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d container removals pending: %w", p.pending.Load(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Name is "docker".
func (p *Provider) Name() string { return "docker" }

// APIVersion is the negotiated API version.
func (p *Provider) APIVersion() string { return p.c.ClientVersion() }

// Resolve checks that every profile's image exists and pins the profile to it: the image id is
// the profile's digest. A profile that names a digest must match its image's id. A profile whose
// image lacks a file it requires is left out, with a warning.
func (p *Provider) Resolve(ctx context.Context, s profile.Set) (profile.Set, error) {
	out := profile.Set{}
	for name, prof := range s {
		if prof.Image == "" {
			return nil, fmt.Errorf("profile %s: no image", name)
		}
		img, err := p.c.ImageInspect(ctx, prof.Image)
		if err != nil {
			return nil, fmt.Errorf("profile %s: image %s missing (build it offline with `make image`): %w", name, prof.Image, err)
		}
		if missing, err := p.missing(ctx, img.ID, prof.Requires); err != nil {
			return nil, fmt.Errorf("profile %s: %w", name, err)
		} else if missing != "" {
			p.log.Warn("profile not offered: its image lacks a file it requires", "profile", name, "image", prof.Image, "file", missing)
			continue
		}
		pinned := prof
		pinned.Image = img.ID
		if prof.Digest != "" && prof.Digest != img.ID {
			return nil, fmt.Errorf("profile %s: image %s is %s, want digest %s", name, prof.Image, img.ID, prof.Digest)
		}
		pinned.Digest = img.ID
		out[name] = pinned
	}
	return out, nil
}

// Create makes and starts a container whose bootstrap waits on stdin, under shape's limits
// until Assign.
func (p *Provider) Create(ctx context.Context, shape sandbox.Shape) (sandbox.Sandbox, error) {
	ws := cmp.Or(shape.WorkspaceBytes, 64<<20)
	tmp := cmp.Or(shape.TmpBytes, 64<<20)
	if len(shape.Profile.Interpreter) == 0 {
		return nil, fmt.Errorf("profile %s: no interpreter", shape.Profile.Name)
	}
	if err := p.checkInit(); err != nil {
		return nil, err
	}
	uid, _, err := p.uids.Take()
	if err != nil {
		return nil, err
	}
	user := strconv.Itoa(uid)
	res := p.resources(shape.Limits)
	ulimits := []*container.Ulimit{{Name: "core", Soft: 1, Hard: 1}, {Name: "nofile", Soft: 1024, Hard: 1024},
		{Name: "fsize", Soft: max(ws, tmp), Hard: max(ws, tmp)}}
	if p.o.Traits.NprocFromShape {
		n := max(shape.Limits.Pids-1, 0)
		ulimits = append(ulimits, &container.Ulimit{Name: "nproc", Soft: n, Hard: n})
	}
	name := "sb-" + uuid.NewString()
	// Not ended with ctx: a creation the daemon completes after a cancel would leave a container
	// no one tracks until the reaper's pass (a pool stopping while it refills).
	createCtx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancelCreate()
	created, err := p.c.ContainerCreate(createCtx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      shape.Profile.Image,
			Entrypoint: []string{containerinit.Path},
			Cmd:        shape.Profile.Interpreter,
			Env:        append(append(sandbox.BaseEnv(), containerinit.Env...), containerinit.EnvUser+"="+user+":"+user),
			// The init runs as root with containerinit.Caps, a uid the program (started as uid) cannot
			// signal or trace.
			User:            "0:0",
			WorkingDir:      "/workspace",
			AttachStdin:     true,
			AttachStdout:    true,
			AttachStderr:    true,
			OpenStdin:       true,
			StdinOnce:       true,
			NetworkDisabled: true,
			Hostname:        "sandbox",
			// No job: the container is made before its job is known, and labels cannot change.
			Labels: map[string]string{LabelFleet: p.o.Fleet, LabelWorker: p.o.Worker,
				LabelDeadline: strconv.FormatInt(time.Now().Add(cmp.Or(p.o.Lifetime, DefaultLifetime)).Unix(), 10)},
		},
		HostConfig: &container.HostConfig{
			Runtime:        p.o.Runtime,
			NetworkMode:    "none",
			CapDrop:        []string{"ALL"},
			CapAdd:         containerinit.Caps,
			SecurityOpt:    []string{"no-new-privileges", "seccomp=" + p.seccomp},
			ReadonlyRootfs: true,
			MaskedPaths:    maskedPaths,
			Tmpfs: map[string]string{
				// exec: Docker's tmpfs default is noexec, and a compiled language runs what it
				// compiled there, as on the namespace provider.
				"/workspace": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=0700,uid=%d,gid=%d", ws, uid, uid),
				"/tmp":       fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmp),
			},
			Mounts:    []mount.Mount{{Type: mount.TypeBind, Source: p.init, Target: containerinit.Path, ReadOnly: true}},
			LogConfig: container.LogConfig{Type: "none"},
			Resources: container.Resources{
				CgroupParent: p.cg.parent(name),
				Memory:       res.Memory,
				MemorySwap:   res.MemorySwap,
				PidsLimit:    res.PidsLimit,
				NanoCPUs:     res.NanoCPUs,
				Ulimits:      ulimits,
			},
		},
	})
	if err != nil {
		p.uids.Release(uid)
		return nil, fmt.Errorf("create container: %w", err)
	}
	p.mu.Lock()
	p.live[created.ID] = name
	p.mu.Unlock()
	s := &containerSandbox{p: p, id: created.ID, name: name, uid: uid, limits: shape.Limits}
	if err := s.start(ctx, shape.Profile.Ready); err != nil {
		return nil, errors.Join(fmt.Errorf("start container: %w", err), s.Destroy(context.WithoutCancel(ctx)))
	}
	return s, nil
}

// maskedPaths are Docker's own masks (Docker 28's list) and the host-wide /proc files that tell a
// job about the host and its other tenants (the kernel's command line, the load, memory and
// pressure figures), which the namespace provider's /proc (subset=pid) does not have. Setting
// them replaces Docker's list.
var maskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/sys/firmware", "/sys/devices/virtual/powercap",
	"/proc/cmdline", "/proc/loadavg", "/proc/meminfo", "/proc/pressure"}

// checkInit makes sure the init copy is still the file whose content New verified: the same
// inode, unchanged since (its ctime moves on any write, chmod or chown), so that a copy swapped or
// rewritten after the start is never mounted. Only root can do either in the state directory.
func (p *Provider) checkInit() error {
	fi, err := os.Lstat(p.init)
	if err != nil {
		return fmt.Errorf("container init: %w", err)
	}
	was, now := p.initStat.Sys().(*syscall.Stat_t), fi.Sys().(*syscall.Stat_t)
	if !os.SameFile(fi, p.initStat) || now.Ctim != was.Ctim || fi.Mode() != p.initStat.Mode() || now.Uid != was.Uid {
		return fmt.Errorf("container init %s changed since it was verified", p.init)
	}
	return nil
}

type containerSandbox struct {
	p          *Provider
	id         string
	name       string         // of its parent cgroup
	uid        int            // the program's, locked until the container is removed
	limits     sandbox.Limits // those it was created with
	use        sandbox.Use
	attach     client.ContainerAttachResult
	wait       client.ContainerWaitResult
	cancelWait context.CancelFunc
	waited     bool // the wait's answer was taken
	exited     bool // the wait answered that the container exited (not that it gave up)
	gone       bool
	held       atomic.Bool // the init reported the program's end and keeps /workspace
}

func (s *containerSandbox) ID() string { return s.id }

func (s *containerSandbox) start(ctx context.Context, ready string) error {
	var err error
	s.attach, err = s.p.c.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	// Waiting is asked for before start, so an exit cannot slip past it.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancelWait = cancel
	s.wait = s.p.c.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err = s.p.c.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return err
	}
	return s.ready(ctx, ready)
}

// ready reads the profile's ready line from the container's stdout, if it has one: then the
// interpreter has started and waits on stdin. The attach stream is multiplexed: frames of an
// 8-byte header (stream, size) and their bytes.
func (s *containerSandbox) ready(ctx context.Context, want string) error {
	if want == "" {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.attach.Conn.SetReadDeadline(deadline)
	defer s.attach.Conn.SetReadDeadline(time.Time{})
	var stdout, stderr []byte
	for len(stdout) < len(want) {
		var hdr [8]byte
		if _, err := io.ReadFull(s.attach.Reader, hdr[:]); err != nil {
			return fmt.Errorf("bootstrap not ready (stdout %q, stderr %q): %w", stdout, stderr, err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(hdr[4:]))
		if _, err := io.ReadFull(s.attach.Reader, frame); err != nil {
			return fmt.Errorf("bootstrap not ready: %w", err)
		}
		if hdr[0] == byte(stdcopy.Stdout) {
			stdout = append(stdout, frame...)
		} else {
			stderr = append(stderr, frame...)
		}
	}
	if string(stdout) != want {
		return fmt.Errorf("bootstrap not ready: stdout %q, stderr %q", stdout, stderr)
	}
	return nil
}

func (s *containerSandbox) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, _ = s.p.c.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "KILL"})
}

// endProgram asks the init to kill the program and keep the container, so that a program
// stopped at its timeout or by a cancel leaves its files to read; an init that has not reported
// the program's end within killGrace is killed with the container.
func (s *containerSandbox) endProgram() {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, _ = s.p.c.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "USR1"})
	time.AfterFunc(killGrace, func() {
		if !s.held.Load() {
			s.kill()
		}
	})
}

// killGrace is how long an init may take to end its program before the container is killed.
const killGrace = 2 * time.Second

// resources are a container's cgroup limits for l: the init's and the runtime's shares on top.
func (p *Provider) resources(l sandbox.Limits) container.Resources {
	pids := l.Pids + sandbox.SupervisorTasks + p.o.Traits.Tasks + p.o.Traits.TasksPerPid*l.Pids
	mem := l.MemoryBytes + sandbox.SupervisorMemory + p.o.Traits.Memory
	return container.Resources{Memory: mem, MemorySwap: mem, PidsLimit: &pids, NanoCPUs: int64(l.CPUs * 1e9)}
}

// Assign applies the job's limits to the running container: the update API (memory, swap, pids
// and CPU quota at once; checked on Docker 20.10, API 1.41, cgroup v1).
func (s *containerSandbox) Assign(ctx context.Context, job sandbox.Job) error {
	if err := s.use.Assign(job); err != nil {
		return err
	}
	// The wait asked for before start answers once the container exits.
	select {
	case <-s.wait.Result:
		s.waited = true
		return fmt.Errorf("assign %s: %w", s.id, sandbox.ErrEnded)
	case <-s.wait.Error:
		s.waited = true
		return fmt.Errorf("assign %s: %w", s.id, sandbox.ErrEnded)
	default:
	}
	s.p.cg.mark(s.name)
	if err := s.p.cg.chargeSockets(s.name, s.id, job.Limits.MemoryBytes); err != nil {
		return fmt.Errorf("assign %s: %w", s.id, err)
	}
	if s.p.o.Traits.NprocFromShape && job.Limits.Pids < s.limits.Pids {
		if err := s.lowerNproc(ctx, max(job.Limits.Pids-1, 0)); err != nil {
			return fmt.Errorf("assign %s: %w", s.id, err)
		}
	}
	res := s.p.resources(job.Limits)
	if s.p.o.Traits.NoUpdate {
		// Always: the update moves the memory limit to the parent cgroup.
		if err := s.p.cg.update(s.name, s.id, res); err != nil {
			return fmt.Errorf("assign %s: %w", s.id, err)
		}
		return nil
	}
	// A job with the limits the container waits under (the defaults) spares the daemon a call.
	if job.Limits.MemoryBytes == s.limits.MemoryBytes && job.Limits.Pids == s.limits.Pids && job.Limits.CPUs == s.limits.CPUs {
		return nil
	}
	if _, err := s.p.c.ContainerUpdate(ctx, s.id, client.ContainerUpdateOptions{Resources: &res}); err != nil {
		return fmt.Errorf("assign %s: %w", s.id, err)
	}
	return nil
}

func (s *containerSandbox) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (sandbox.Exit, error) {
	var exit sandbox.Exit
	job, err := s.use.Start()
	if err != nil {
		return exit, err
	}
	if err := s.p.o.DispatchLog.Record(job, s.id); err != nil {
		return exit, err
	}
	start := time.Now()
	// A daemon that does not confirm a kill within KillWait is given up on: Run closes the
	// attach (which also tells the init to end the container) and stops waiting.
	var giveUp *time.Timer
	var giveUpOnce sync.Once
	kill := func() {
		giveUpOnce.Do(func() {
			giveUp = time.AfterFunc(cmp.Or(s.p.o.KillWait, defaultKillWait), func() {
				s.attach.Close()
				s.cancelWait()
			})
		})
		s.endProgram()
	}
	guard := sandbox.Watch(ctx, job.Limits.Timeout, kill)
	defer guard.Stop()

	var wg sync.WaitGroup
	marker := newMarker()
	wg.Go(func() {
		if err := containerinit.WriteFrame(s.attach.Conn, containerinit.FrameHold, marker); err != nil {
			return
		}
		// The attach stays open after the payload: its close is what tells the init the worker is gone.
		if _, err := io.Copy(frameWriter{s.attach.Conn}, stdin); err == nil {
			_ = containerinit.WriteFrame(s.attach.Conn, containerinit.FrameClose, nil)
		}
	})
	// The kill runs beside the demultiplexer: the daemon finishes a kill only once the attached
	// streams drain, and the demultiplexer is what drains them.
	out := &killOnError{w: stdout, onErr: func() { wg.Go(guard.Kill) }}
	errw := &killOnError{w: stderr, onErr: out.onErr}
	var ends int
	trailer := &trailerWriter{next: out, marker: marker, ends: &ends}
	errTrailer := &trailerWriter{next: errw, marker: marker, noStatus: true, ends: &ends}
	_, _ = stdcopy.StdCopy(trailer, errTrailer, s.attach.Reader)
	if trailer.done && errTrailer.done {
		return s.heldExit(exit, start, trailer.status, guard, &wg, &giveUp, &giveUpOnce)
	}
	trailer.flush()
	errTrailer.flush()
	var waitErr error
	select {
	case <-s.wait.Result:
	case waitErr = <-s.wait.Error:
	}
	s.waited, s.exited = true, waitErr == nil
	s.cancelWait()
	s.attach.Close()
	wg.Wait()
	giveUpOnce.Do(func() {})
	if giveUp != nil {
		giveUp.Stop()
	}
	exit.Usage.Wall = time.Since(start)
	if waitErr != nil {
		return exit, fmt.Errorf("wait %s: %w", s.id, waitErr)
	}
	st := s.p.cg.stats(s.name)
	exit.Usage.CPU, exit.Usage.MaxRSS = st.CPU, st.Peak
	info, err := s.p.c.ContainerInspect(context.WithoutCancel(ctx), s.id, client.ContainerInspectOptions{})
	if err != nil {
		return exit, fmt.Errorf("inspect %s: %w", s.id, err)
	}
	state := info.Container.State
	exit.Code, exit.OOM = state.ExitCode, state.OOMKilled || st.OOM
	// Docker reports a death by signal as 128+signal, as a shell does.
	if exit.Code > 128 && exit.Code < 128+65 {
		exit.Signal = unix.SignalName(unix.Signal(exit.Code - 128))
	}
	guard.Mark(&exit)
	if !exit.OOM && !exit.Killed && !exit.TimedOut {
		// The init reports every program's end before it exits; a container that ended without
		// that report lost its init (a crash): the program's outcome is not known.
		return exit, fmt.Errorf("container %s ended (exit %d) without its init's report: %w", s.id, exit.Code, errInitLost)
	}
	return exit, nil
}

// errInitLost is a container init that ended before it reported the program's end.
var errInitLost = errors.New("sandbox init lost")

// killOnError passes writes on until one fails, then kills the container and swallows the rest,
// so the demultiplexer drains the stream to its end.
type killOnError struct {
	w      io.Writer
	onErr  func()
	failed atomic.Bool
}

func (k *killOnError) Write(b []byte) (int, error) {
	if k.failed.Load() {
		return len(b), nil
	}
	if _, err := k.w.Write(b); err != nil {
		k.failed.Store(true)
		k.onErr()
	}
	return len(b), nil
}

// Destroy removes the container and its parent cgroup. When the program has ended (the init
// reported its end and holds the container, or the container exited), nothing of the job runs
// any more and its files were read: Destroy returns at once and the removal, which takes the
// daemon about 100 ms, runs off the job's path, bounded by maxRemovals; Close waits for it.
// Otherwise Destroy returns nil once the daemon confirms the container is gone. From its first
// call the provider no longer counts the container as live, so the reaper removes whatever a
// failed removal left.
func (s *containerSandbox) Destroy(ctx context.Context) error {
	if s.gone {
		return nil
	}
	s.p.mu.Lock()
	delete(s.p.live, s.id)
	s.p.mu.Unlock()
	ended := s.held.Load() || s.exited
	if s.attach.Conn != nil {
		s.attach.Close()
	}
	if s.cancelWait != nil && !s.waited {
		// Run never took the wait's answer: end the wait and take it, so its goroutine ends.
		s.cancelWait()
		select {
		case <-s.wait.Result:
		case <-s.wait.Error:
		}
		s.waited = true
	}
	if ended {
		s.gone = true
		s.p.pending.Add(1)
		s.p.mu.Lock()
		s.p.pendingIDs[s.id] = true
		s.p.mu.Unlock()
		s.p.removals.Go(func() {
			defer func() {
				s.p.mu.Lock()
				delete(s.p.pendingIDs, s.id)
				s.p.mu.Unlock()
				s.p.pending.Add(-1)
			}()
			s.p.removing <- struct{}{}
			defer func() { <-s.p.removing }()
			if err := s.p.removeAll(context.Background(), s.id, s.name); err != nil {
				// A process of the uid may live: the uid stays taken.
				s.p.log.Warn("remove ended container; the reaper will", "container", s.id, "err", err)
				return
			}
			s.p.uids.Release(s.uid)
		})
		return nil
	}
	if err := s.p.removeAll(ctx, s.id, s.name); err != nil {
		return err
	}
	s.gone = true
	s.p.uids.Release(s.uid)
	return nil
}

// maxRemovals bounds the container removals Destroy leaves running at once.
const maxRemovals = 2

// removeAll removes a container and its parent cgroup.
func (p *Provider) removeAll(ctx context.Context, id, name string) error {
	if p.removeHook != nil {
		p.removeHook()
	}
	if _, err := p.remove(ctx, id); err != nil {
		return err
	}
	if err := p.cg.remove(name); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return nil
}

func (p *Provider) remove(ctx context.Context, id string) (removed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	_, err = p.c.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("remove %s: %w", id, err)
	}
	removed = err == nil
	if _, err := p.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("remove %s: container still there (%v)", id, err)
	}
	return removed, nil
}

// Reap removes this fleet's containers that no live worker owns: those labelled with this
// worker that it no longer tracks; those not running for more than a minute (a container's init
// ends it when its worker is gone, waiting or running, so a dead worker's containers stop; one
// never started is a worker that died between create and start); and those past the deadline
// their own worker wrote on them ([LabelDeadline]), never by this worker's settings, so workers
// configured differently share a daemon. It returns how many it removed.
func (p *Provider) Reap(ctx context.Context) (int, error) {
	list, err := p.c.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelFleet+"="+p.o.Fleet)})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range list.Items {
		p.mu.Lock()
		_, live := p.live[c.ID]
		live = live || p.pendingIDs[c.ID]
		p.mu.Unlock()
		if live {
			continue
		}
		created := time.Unix(c.Created, 0)
		mine := p.o.Worker != "" && c.Labels[LabelWorker] == p.o.Worker
		if !(expired(c.Labels[LabelDeadline]) || mine || p.stopped(ctx, c.ID, created)) {
			continue
		}
		// A container a pending removal took between the list and the check above is already
		// gone: the reaper did not remove it, so it does not count it.
		removed, err := p.remove(ctx, c.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !removed {
			continue
		}
		n++
		p.log.Warn("reaped container", "container", c.ID, "of_worker", c.Labels[LabelWorker])
	}
	// Parent cgroups whose container is gone (a failed Destroy, a dead worker): a parent still
	// holding its container's cgroup refuses removal and stays.
	errs = append(errs, p.cg.removeEmpty(func(name string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, n := range p.live {
			if n == name {
				return true
			}
		}
		return false
	}))
	return n, errors.Join(errs...)
}

// expired reports whether a container's deadline label has passed; a container without one
// (or with one this worker cannot read) is left to the other rules.
func expired(deadline string) bool {
	sec, err := strconv.ParseInt(deadline, 10, 64)
	return err == nil && time.Now().After(time.Unix(sec, 0))
}

// stopped reports whether a container has not run for a minute: exited, dead, or created and
// never started.
func (p *Provider) stopped(ctx context.Context, id string, created time.Time) bool {
	info, err := p.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || info.Container.State == nil {
		return false
	}
	st := info.Container.State
	if st.Running || st.Paused || st.Restarting {
		return false
	}
	since := created
	if t, err := time.Parse(time.RFC3339Nano, st.FinishedAt); err == nil && t.After(since) {
		since = t
	}
	return time.Since(since) > time.Minute
}
