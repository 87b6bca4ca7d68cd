package docker

import (
	"encoding/json"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/internal/sandbox"
)

// seccompProfile is Docker's default allowlist less sandbox.DeniedSyscalls (Docker allows ptrace
// of a sibling, for one) and less AF_VSOCK sockets, as JSON for the security option.
func seccompProfile() (string, error) {
	p := seccomp.DefaultProfile()
	rules := p.Syscalls[:0]
	for _, r := range p.Syscalls {
		r.Names = slices.DeleteFunc(r.Names, func(n string) bool {
			return slices.Contains(sandbox.DeniedSyscalls, n) || n == "socket"
		})
		if len(r.Names) > 0 {
			rules = append(rules, r)
		}
	}
	rules = append(rules, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
		Names:  []string{"socket"},
		Action: specs.ActAllow,
		Args:   []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_VSOCK, Op: specs.OpNotEqual}},
	}})
	p.Syscalls = rules
	b, err := json.Marshal(p)
	return string(b), err
}
