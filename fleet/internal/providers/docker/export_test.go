package docker

import (
	"sync"

	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// BreakInit sends sb's init a frame of no known kind: the init fails on it, as on a crash, and
// ends its container without reporting the program's end.
func BreakInit(sb sandbox.Sandbox) error {
	return containerinit.WriteFrame(sb.(*containerSandbox).attach.Conn, 'X', nil)
}

// BlockRemovals holds p's container removals until release is called.
func BlockRemovals(p *Provider) (release func()) {
	gate := make(chan struct{})
	p.removeHook = func() { <-gate }
	return sync.OnceFunc(func() { close(gate) })
}
