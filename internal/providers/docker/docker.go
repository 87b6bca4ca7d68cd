// Package docker runs each job in a fresh Docker container, never reused: network mode none, all
// capabilities dropped, no-new-privileges, a read-only root, size-limited tmpfs /workspace and
// /tmp, memory equal to memory+swap, a pids limit, a CPU quota, user nobody, and no log kept. It
// attaches before start, so the payload travels on the container's stdin and output is
// demultiplexed into pages as it comes.
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/sandbox"
)

// Labels put on every container.
const (
	LabelFleet   = "dev.runfleet.fleet"
	LabelJob     = "dev.runfleet.job"
	LabelAttempt = "dev.runfleet.attempt"
	LabelWorker  = "dev.runfleet.worker"
)

// Options configure a [Provider].
type Options struct {
	Fleet       string // label value that marks this fleet's containers; default "runfleet"
	User        string // default "65534:65534"
	DispatchLog sandbox.DispatchLog
	Logger      *slog.Logger
}

// Provider makes container sandboxes.
type Provider struct {
	c   *client.Client
	o   Options
	log *slog.Logger

	seccomp  string // profile JSON
	uid, gid string // of the sandbox user, owner of /workspace

	mu   sync.Mutex
	live map[string]bool // containers this provider made and has not removed
}

var _ sandbox.Provider = (*Provider)(nil)

// New connects to the Docker daemon named by the environment (DOCKER_HOST, or the default socket),
// negotiating the API version down to the daemon's.
func New(ctx context.Context, o Options) (*Provider, error) {
	o.Fleet = cmp.Or(o.Fleet, "runfleet")
	o.User = cmp.Or(o.User, "65534:65534")
	sc, err := seccompProfile()
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	uid, gid, ok := strings.Cut(o.User, ":")
	if !ok {
		gid = uid
	}
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		c.Close()
		return nil, fmt.Errorf("docker daemon unreachable (is dockerd running and the socket mounted?): %w", err)
	}
	return &Provider{c: c, o: o, log: cmp.Or(o.Logger, slog.Default()), live: map[string]bool{},
		seccomp: sc, uid: uid, gid: gid}, nil
}

// Ready reports whether the daemon answers.
func (p *Provider) Ready(ctx context.Context) error {
	_, err := p.c.Ping(ctx, client.PingOptions{})
	return err
}

// Close releases the client.
func (p *Provider) Close() error { return p.c.Close() }

// Name is "docker".
func (p *Provider) Name() string { return "docker" }

// APIVersion is the negotiated API version.
func (p *Provider) APIVersion() string { return p.c.ClientVersion() }

// Resolve checks that every profile's image exists and pins the profile to it: the image id is
// the profile's digest. A profile that names a digest must match its image's id.
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

// Create makes and starts a container whose bootstrap waits on stdin.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	pids := spec.Pids
	ws := cmp.Or(spec.WorkspaceBytes, 64<<20)
	tmp := cmp.Or(spec.TmpBytes, 64<<20)
	res, err := p.c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:           spec.Profile.Image,
			Entrypoint:      spec.Profile.Interpreter[:1],
			Cmd:             spec.Profile.Interpreter[1:],
			Env:             sandbox.BaseEnv(),
			User:            p.o.User,
			WorkingDir:      "/workspace",
			AttachStdin:     true,
			AttachStdout:    true,
			AttachStderr:    true,
			OpenStdin:       true,
			StdinOnce:       true,
			NetworkDisabled: true,
			Hostname:        "sandbox",
			Labels: map[string]string{LabelFleet: p.o.Fleet, LabelJob: spec.JobID,
				LabelAttempt: strconv.FormatInt(spec.Attempt, 10), LabelWorker: spec.Worker},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges", "seccomp=" + p.seccomp},
			ReadonlyRootfs: true,
			Tmpfs: map[string]string{
				"/workspace": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=0700,uid=%s,gid=%s", ws, p.uid, p.gid),
				"/tmp":       fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmp),
			},
			LogConfig: container.LogConfig{Type: "none"},
			Resources: container.Resources{
				Memory:     spec.MemoryBytes,
				MemorySwap: spec.MemoryBytes,
				PidsLimit:  &pids,
				NanoCPUs:   int64(spec.CPUs * 1e9),
				Ulimits: []*container.Ulimit{{Name: "core", Soft: 0, Hard: 0}, {Name: "nofile", Soft: 1024, Hard: 1024},
					{Name: "fsize", Soft: max(ws, tmp), Hard: max(ws, tmp)}},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	p.mu.Lock()
	p.live[res.ID] = true
	p.mu.Unlock()
	s := &containerSandbox{p: p, id: res.ID, spec: spec}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("start container: %w", err), s.Destroy(context.WithoutCancel(ctx)))
	}
	return s, nil
}

type containerSandbox struct {
	p      *Provider
	id     string
	spec   sandbox.Spec
	attach client.ContainerAttachResult
	wait   client.ContainerWaitResult
	gone   bool
}

func (s *containerSandbox) ID() string { return s.id }

func (s *containerSandbox) start(ctx context.Context) error {
	var err error
	s.attach, err = s.p.c.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	// Waiting is asked for before start, so an exit cannot slip past it.
	s.wait = s.p.c.ContainerWait(context.WithoutCancel(ctx), s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	_, err = s.p.c.ContainerStart(ctx, s.id, client.ContainerStartOptions{})
	return err
}

func (s *containerSandbox) kill() {
	_, _ = s.p.c.ContainerKill(context.Background(), s.id, client.ContainerKillOptions{Signal: "KILL"})
}

func (s *containerSandbox) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (sandbox.Exit, error) {
	var exit sandbox.Exit
	if err := s.p.o.DispatchLog.Record(s.spec, s.id); err != nil {
		return exit, err
	}
	start := time.Now()
	guard := sandbox.Watch(ctx, s.spec.Timeout, s.kill)
	defer guard.Stop()

	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(s.attach.Conn, stdin)
		_ = s.attach.CloseWrite()
	})
	// The kill runs beside the demultiplexer: the daemon finishes a kill only once the attached
	// streams drain, and the demultiplexer is what drains them.
	out := &killOnError{w: stdout, onErr: func() { wg.Go(guard.Kill) }}
	errw := &killOnError{w: stderr, onErr: out.onErr}
	_, _ = stdcopy.StdCopy(out, errw, s.attach.Reader)
	var waitErr error
	select {
	case <-s.wait.Result:
	case waitErr = <-s.wait.Error:
	}
	s.attach.Close()
	wg.Wait()
	exit.Usage.Wall = time.Since(start)
	if waitErr != nil {
		return exit, fmt.Errorf("wait %s: %w", s.id, waitErr)
	}
	info, err := s.p.c.ContainerInspect(context.WithoutCancel(ctx), s.id, client.ContainerInspectOptions{})
	if err != nil {
		return exit, fmt.Errorf("inspect %s: %w", s.id, err)
	}
	st := info.Container.State
	exit.Code, exit.OOM = st.ExitCode, st.OOMKilled
	// Docker reports a death by signal as 128+signal, as a shell does.
	if exit.Code > 128 && exit.Code < 128+65 {
		exit.Signal = unix.SignalName(unix.Signal(exit.Code - 128))
	}
	guard.Mark(&exit)
	return exit, nil
}

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

// Destroy removes the container and returns nil once the daemon confirms it is gone.
func (s *containerSandbox) Destroy(ctx context.Context) error {
	if s.gone {
		return nil
	}
	if s.attach.Conn != nil {
		s.attach.Close()
	}
	if err := s.p.remove(ctx, s.id); err != nil {
		return err
	}
	s.gone = true
	return nil
}

func (p *Provider) remove(ctx context.Context, id string) error {
	_, err := p.c.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	if _, err := p.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s: container still there (%v)", id, err)
	}
	p.mu.Lock()
	delete(p.live, id)
	p.mu.Unlock()
	return nil
}

// Reap removes this fleet's containers that no live worker owns: those labelled with this
// worker that it no longer tracks, those whose job's lease is gone (leased reports it; the
// provider does not know where leases live), and any created more than olderThan ago, since no
// job outlives its timeout. It returns how many it removed.
func (p *Provider) Reap(ctx context.Context, worker string, olderThan time.Duration, leased func(ctx context.Context, jobID string) bool) (int, error) {
	list, err := p.c.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelFleet+"="+p.o.Fleet)})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range list.Items {
		p.mu.Lock()
		live := p.live[c.ID]
		p.mu.Unlock()
		old := time.Since(time.Unix(c.Created, 0)) > olderThan
		mine := c.Labels[LabelWorker] == worker
		// A container younger than a minute may belong to a job whose lease is being taken now.
		orphan := time.Since(time.Unix(c.Created, 0)) > time.Minute && leased != nil && !leased(ctx, c.Labels[LabelJob])
		if live || !(old || mine || orphan) {
			continue
		}
		if err := p.remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		p.log.Warn("reaped container", "container", c.ID, "job_id", c.Labels[LabelJob], "of_worker", c.Labels[LabelWorker])
	}
	return n, errors.Join(errs...)
}
