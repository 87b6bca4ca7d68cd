package namespace

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// TestReadFilesAfterReap: a supervisor reaped before its sandbox noticed leaves its pid free for
// any process to take, so /proc/PID/root may be another sandbox's root. ReadFiles must answer
// that the workspace is gone, never read through the pid. Here the pid is pointed at this test's
// own process, a live stranger, as a reused pid would be.
func TestReadFilesAfterReap(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Pid = os.Getpid()
	s := &nsSandbox{id: "reaped", cmd: cmd, exited: make(chan struct{}), started: true}
	err := s.ReadFiles(t.Context(), func(string) bool { return true }, func(p string, _ int64, _ io.Reader) error {
		t.Errorf("read %s through a reaped supervisor's pid", p)
		return nil
	})
	if !errors.Is(err, sandbox.ErrWorkspaceGone) {
		t.Fatalf("ReadFiles() = %v, want ErrWorkspaceGone", err)
	}
}
