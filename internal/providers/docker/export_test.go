package docker

import "github.com/runfleet/runfleet/internal/sandbox"

// BreakInit sends sb's init a frame of no known kind: the init fails on it, as on a crash, and
// ends its container without reporting the program's end.
func BreakInit(sb sandbox.Sandbox) error {
	return writeFrame(sb.(*containerSandbox).attach.Conn, 'X', nil)
}
