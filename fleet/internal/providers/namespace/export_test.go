package namespace

import (
	"fmt"
	"os"
	"strings"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// SetFilter replaces the seccomp program the provider's sandboxes load, for a benchmark of one
// filter against another.
func (p *Provider) SetFilter(prog []bpf.RawInstruction) { p.filter = encodeFilter(prog) }

// DenylistFilter is the filter sandboxes loaded before the allowlist: go-seccomp-bpf's denylist
// of sandbox.DeniedSyscalls with default allow, kept here as the benchmark's baseline.
func DenylistFilter() ([]bpf.RawInstruction, error) {
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: eperm, Names: sandbox.DeniedSyscalls},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.EAFNOSUPPORT), NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_VSOCK}}},
			}},
			{Action: eperm, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
			}},
		},
	}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	return bpf.Assemble(prog)
}

// KillWaiting kills a sandbox's supervisor, as an outside kill would, and returns a channel
// closed once the provider has seen it end.
func KillWaiting(sb sandbox.Sandbox) <-chan struct{} {
	s := sb.(*nsSandbox)
	s.kill()
	return s.exited
}

// SignalSupervisor sends sig to a sandbox's supervisor.
func SignalSupervisor(sb sandbox.Sandbox, sig os.Signal) error {
	return sb.(*nsSandbox).cmd.Process.Signal(sig)
}

// StatusPending says whether the supervisor of sb wrote a report that no one has read yet.
func StatusPending(sb sandbox.Sandbox) bool {
	rc, err := sb.(*nsSandbox).statusFile.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	return n > 0
}

// SupervisorThreads counts the threads of a sandbox's supervisor.
func SupervisorThreads(sb sandbox.Sandbox) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", sb.(*nsSandbox).cmd.Process.Pid))
	return len(tasks), err
}

// ZygotePids returns the pid of each running zygote of p, by profile name.
func ZygotePids(p *Provider) map[string]int {
	p.zmu.Lock()
	defer p.zmu.Unlock()
	out := map[string]int{}
	for key, z := range p.zygotes {
		name, _, _ := strings.Cut(key, "@")
		out[name] = z.cmd.Process.Pid
	}
	return out
}
