package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/sandbox/cgstat"
)

// A container's /workspace is a tmpfs: it lives as long as the container, and the daemon's
// archive API does not see into it. So the init holds the container after the program ended
// (see containerinit.FrameHold) and the worker reads the files through an exec of the init as a collector,
// which writes them as a tar stream.

var _ sandbox.FileReader = (*containerSandbox)(nil)

// newMarker is a marker the program cannot guess: it starts with NUL, which output rarely holds,
// so that almost nothing is held back waiting to tell it from output.
func newMarker() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return []byte("\x00runfleet-exit-" + hex.EncodeToString(b) + ":")
}

// errHeld ends the demultiplexing of a container's output at the init's marker.
var errHeld = errors.New("program ended; container held")

// trailerWriter passes one stream of the program's output on until the marker, then reads what
// follows it to the end of the line: the wait status on stdout, nothing on stderr. A tail of
// output that could begin the marker waits for the next write. The daemon forwards a container's
// stdout and stderr apart, so the marker of one stream can come before the last output of the
// other: the demultiplexing ends (errHeld) only once every stream sharing ends has seen its own.
type trailerWriter struct {
	next     io.Writer
	marker   []byte
	noStatus bool // stderr's trailer: the marker alone
	ends     *int // trailers seen of the streams read together; nil: this stream alone
	pending  []byte
	done     bool
	status   syscall.WaitStatus
}

func (t *trailerWriter) Write(b []byte) (int, error) {
	if t.done {
		return len(b), t.held()
	}
	t.pending = append(t.pending, b...)
	if i := bytes.Index(t.pending, t.marker); i >= 0 {
		if i > 0 {
			_, _ = t.next.Write(t.pending[:i])
			t.pending = append(t.pending[:0], t.pending[i:]...)
		}
		rest := t.pending[len(t.marker):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return len(b), nil
		}
		if !t.noStatus {
			n, err := strconv.ParseUint(string(rest[:nl]), 10, 32)
			if err != nil {
				return len(b), fmt.Errorf("container init: status %q: %w", rest[:nl], err)
			}
			t.status = syscall.WaitStatus(n)
		}
		t.done, t.pending = true, nil
		if t.ends != nil {
			*t.ends++
		}
		return len(b), t.held()
	}
	keep := 0
	for k := min(len(t.pending), len(t.marker)-1); k > 0; k-- {
		if bytes.HasPrefix(t.marker, t.pending[len(t.pending)-k:]) {
			keep = k
			break
		}
	}
	if out := t.pending[:len(t.pending)-keep]; len(out) > 0 {
		_, _ = t.next.Write(out)
	}
	t.pending = append(t.pending[:0], t.pending[len(t.pending)-keep:]...)
	return len(b), nil
}

// held is errHeld once every stream read together has seen its trailer.
func (t *trailerWriter) held() error {
	if t.ends == nil || *t.ends == 2 {
		return errHeld
	}
	return nil
}

// flush passes on what was held back, when the output ended without the marker.
func (t *trailerWriter) flush() {
	if !t.done && len(t.pending) > 0 {
		_, _ = t.next.Write(t.pending)
		t.pending = nil
	}
}

// ReadFiles runs the collector in the held container and reads its tar stream.
func (s *containerSandbox) ReadFiles(ctx context.Context, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	if !s.held.Load() || s.gone {
		return fmt.Errorf("read %s: %w", s.id, sandbox.ErrWorkspaceGone)
	}
	ex, err := s.p.c.ExecCreate(ctx, s.id, s.initExec(containerinit.CollectArg))
	if err != nil {
		return fmt.Errorf("read %s: collector: %w", s.id, err)
	}
	att, err := s.p.c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("read %s: collector: %w", s.id, err)
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := stdcopy.StdCopy(pw, &limitedBuffer{b: &stderr, n: 4096}, att.Reader)
		pw.CloseWithError(err)
	})
	err = readTar(tar.NewReader(pr), match, fn)
	att.Close()
	pr.Close()
	wg.Wait()
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w (collector: %q)", s.id, err, stderr.String())
	}
	st, err := s.p.c.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err == nil && st.ExitCode != 0 {
		err = fmt.Errorf("collector exit %d: %q", st.ExitCode, stderr.String())
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", s.id, err)
	}
	return nil
}

// initExec runs the init binary with args as the sandbox user: started as that user, or as root
// when the runtime must read what it executes, and switched by the init then.
func (s *containerSandbox) initExec(args ...string) client.ExecCreateOptions {
	user := strconv.Itoa(s.uid) + ":" + strconv.Itoa(s.uid)
	opts := client.ExecCreateOptions{User: user, AttachStdout: true, AttachStderr: true,
		WorkingDir: "/", Cmd: append([]string{containerinit.Path}, args...)}
	if s.p.o.Traits.ExecNeedsRead {
		opts.User, opts.Env = "0:0", []string{containerinit.EnvUser + "=" + user}
	}
	return opts
}

// lowerNproc lowers the RLIMIT_NPROC of the waiting program to n, through the init run as the
// sandbox user (see RuntimeTraits.NprocFromShape).
func (s *containerSandbox) lowerNproc(ctx context.Context, n int64) error {
	ex, err := s.p.c.ExecCreate(ctx, s.id, s.initExec(containerinit.NprocArg, strconv.FormatInt(n, 10)))
	if err != nil {
		return fmt.Errorf("nproc: %w", err)
	}
	att, err := s.p.c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("nproc: %w", err)
	}
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&limitedBuffer{b: &out, n: 4096}, &limitedBuffer{b: &out, n: 4096}, att.Reader)
	att.Close()
	if err != nil {
		return fmt.Errorf("nproc: %w", err)
	}
	st, err := s.p.c.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err == nil && st.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %q", st.ExitCode, out.String())
	}
	if err != nil {
		return fmt.Errorf("nproc: %w", err)
	}
	return nil
}

func readTar(tr *tar.Reader, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	bound := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) && bound {
			return fmt.Errorf("collector: %w", sandbox.ErrWalkBound)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader && h.PAXRecords[containerinit.PAXWalkBound] != "" {
			bound = true
			continue
		}
		// fs.ValidPath refuses a name that is not UTF-8: such a name still goes to match and fn,
		// whose caller decides what it means (artifacts skip it and say truncated).
		if h.Typeflag != tar.TypeReg || !fs.ValidPath(strings.ToValidUTF8(h.Name, "_")) || !match(h.Name) {
			continue
		}
		if err := fn(h.Name, h.Size, tr); err != nil {
			return err
		}
	}
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// containerOOM reports an OOM kill in the container's own cgroup, which a held container still
// has: on cgroup v1 the parent's counter does not count its children's kills.
func (l cgroupLayout) containerOOM(name, id string) bool {
	if !l.measures() || l.version == "2" {
		return false
	}
	return cgstat.V1(filepath.Join(l.root, "memory", l.base, name, id), filepath.Join(l.root, "cpuacct", l.base, name, id)).OOM
}

// heldExit finishes a Run whose init reported the program's end and holds the container: the
// attach stays open (its close ends the init), and the status is the init's report.
func (s *containerSandbox) heldExit(exit sandbox.Exit, start time.Time, ws syscall.WaitStatus, guard *sandbox.Guard, wg *sync.WaitGroup, giveUp **time.Timer, giveUpOnce *sync.Once) (sandbox.Exit, error) {
	s.held.Store(true)
	wg.Wait()
	giveUpOnce.Do(func() {})
	if *giveUp != nil {
		(*giveUp).Stop()
	}
	exit.Usage.Wall = time.Since(start)
	st := s.p.cg.stats(s.name)
	exit.Usage.CPU, exit.Usage.MaxRSS = st.CPU, st.Peak
	exit.OOM = st.OOM || s.p.cg.containerOOM(s.name, s.id)
	if ws.Signaled() {
		exit.Signal = unix.SignalName(ws.Signal())
		exit.Code = 128 + int(ws.Signal())
	} else {
		exit.Code = ws.ExitStatus()
	}
	guard.Mark(&exit)
	return exit, nil
}

// missing returns the first of files that image lacks, or "".
func (p *Provider) missing(ctx context.Context, image string, files []string) (string, error) {
	if len(files) == 0 {
		return "", nil
	}
	var lacked string
	err := p.lookInto(ctx, image, func(id string) error {
		for _, f := range files {
			if _, err := p.c.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: f}); err != nil {
				if cerrdefs.IsNotFound(err) {
					lacked = f
					return nil
				}
				return err
			}
		}
		return nil
	})
	return lacked, err
}

// Manifests returns the *.json files image holds in dir by name (the language manifests a `make
// langs` image carries), nil when it holds no dir. Past profile's Shipped bounds is an error.
func (p *Provider) Manifests(ctx context.Context, image, dir string) (map[string][]byte, error) {
	var files map[string][]byte
	var total int64
	err := p.lookInto(ctx, image, func(id string) error {
		res, err := p.c.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: dir})
		if cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		defer res.Content.Close()
		files = map[string][]byte{}
		tr := tar.NewReader(res.Content)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			// The archive's entries are dir's base name, then the files under it.
			name := filepath.Base(h.Name)
			if h.Typeflag != tar.TypeReg || filepath.Dir(h.Name) != filepath.Base(dir) || filepath.Ext(name) != ".json" {
				continue
			}
			if h.Size > profile.ShippedMaxBytes {
				return fmt.Errorf("%s/%s: %d bytes, more than a manifest", dir, name, h.Size)
			}
			if total += h.Size; total > profile.ShippedMaxTotal || len(files) == profile.ShippedMaxManifest {
				return fmt.Errorf("%s: more than %d manifests or %d bytes of them", dir, profile.ShippedMaxManifest, profile.ShippedMaxTotal)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			files[name] = b
		}
	})
	return files, err
}

// lookInto calls look with a container created from image and never started, then removes it.
func (p *Provider) lookInto(ctx context.Context, image string, look func(id string) error) error {
	res, err := p.c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Entrypoint: []string{"/nonexistent"}, NetworkDisabled: true, Labels: map[string]string{LabelFleet: p.o.Fleet}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	defer func() { _, _ = p.remove(context.WithoutCancel(ctx), res.ID) }()
	if err := look(res.ID); err != nil {
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	return nil
}
