package docker

import (
	"io"

	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
)

// DefaultStateDir is where the init's private copy is kept by default: under /run, which only
// root may write.
const DefaultStateDir = "/run/runfleet/docker"

// frameWriter writes data frames to a container's stdin.
type frameWriter struct{ w io.Writer }

func (f frameWriter) Write(b []byte) (int, error) {
	if err := containerinit.WriteFrame(f.w, containerinit.FrameData, b); err != nil {
		return 0, err
	}
	return len(b), nil
}
