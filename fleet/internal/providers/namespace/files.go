package namespace

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

var _ sandbox.FileReader = (*nsSandbox)(nil)

// ReadFiles reads the sandbox's /workspace through its supervisor's root (/proc/PID/root), which
// the supervisor keeps after the program ended and every process of it was killed. A pid names
// whatever process holds it: once the supervisor is reaped, another sandbox's supervisor may take
// its pid. So the directory is opened first and the supervisor then asked, through its pidfd (Go's
// process handle), whether it is still unreaped; reaping cannot be undone, so a yes means the
// pid was still its own at the open, and the walk goes on from that descriptor alone.
func (s *nsSandbox) ReadFiles(ctx context.Context, match func(string) bool, fn func(string, int64, io.Reader) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
		return fmt.Errorf("read %s: %w", s.id, sandbox.ErrWorkspaceGone)
	default:
	}
	if s.destroyed || !s.started {
		return fmt.Errorf("read %s: %w", s.id, sandbox.ErrWorkspaceGone)
	}
	root, err := sandbox.OpenWorkspace("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/root/workspace")
	if gone := s.cmd.Process.Signal(syscall.Signal(0)); gone != nil {
		if root != nil {
			root.Close()
		}
		return fmt.Errorf("read %s: supervisor reaped (%v): %w", s.id, gone, sandbox.ErrWorkspaceGone)
	}
	if err != nil {
		return err
	}
	return sandbox.WalkOpened(ctx, root, match, fn)
}

// endProgram kills every process of the program and keeps the supervisor, so that a program
// stopped at its timeout or by a cancel leaves its files to read. A supervisor that has not
// reported the program's end within killGrace is killed with everything else.
func (s *nsSandbox) endProgram() {
	if !s.started {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGUSR1)
	time.AfterFunc(killGrace, func() {
		if !s.held.Load() {
			s.kill()
		}
	})
}

// killGrace is how long a supervisor may take to end its program before it is killed itself.
const killGrace = 2 * time.Second
