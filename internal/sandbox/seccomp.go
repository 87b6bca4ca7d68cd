package sandbox

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompPolicy is the one system-call policy of every sandbox, whatever the provider: Docker's
// default allowlist for a process without capabilities, less [DeniedSyscalls]. Providers render
// it (the namespace provider as a BPF program, the Docker provider as the profile it sends) and
// add nothing to it. Calls of another ABI than the host's native one (i386 and x32 on amd64) are
// refused whatever their number means there: a rule names a native call.
type SeccompPolicy struct {
	// DefaultErrno answers every native call no rule decides.
	DefaultErrno syscall.Errno
	// ForeignErrno answers every call made through another ABI.
	ForeignErrno syscall.Errno
	// Rules in order: for one name, the first rule whose arguments all hold decides.
	Rules []SeccompRule
}

// SeccompRule decides one call when all its argument conditions hold.
type SeccompRule struct {
	Name  string
	Errno syscall.Errno // 0 allows the call
	Args  []specs.LinuxSeccompArg
}

// Allowed returns the names some rule allows, sorted: the allowlist.
func (p SeccompPolicy) Allowed() []string {
	var out []string
	for _, r := range p.Rules {
		if r.Errno == 0 && !slices.Contains(out, r.Name) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Seccomp returns the policy for this host's architecture.
var Seccomp = sync.OnceValues(func() (SeccompPolicy, error) {
	// No capabilities: the rules Docker keeps for CAP_SYS_ADMIN and the like fall away.
	prof, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		return SeccompPolicy{}, fmt.Errorf("docker's default seccomp profile: %w", err)
	}
	p := SeccompPolicy{DefaultErrno: syscall.EPERM, ForeignErrno: syscall.ENOSYS}
	if prof.DefaultAction != specs.ActErrno || prof.DefaultErrnoRet != nil && *prof.DefaultErrnoRet != uint(syscall.EPERM) {
		return p, fmt.Errorf("docker's default seccomp action is %s, want errno EPERM", prof.DefaultAction)
	}
	for _, s := range prof.Syscalls {
		var errno syscall.Errno
		switch s.Action {
		case specs.ActAllow:
		case specs.ActErrno:
			errno = syscall.EPERM
			if s.ErrnoRet != nil {
				errno = syscall.Errno(*s.ErrnoRet)
			}
		default:
			return p, fmt.Errorf("docker's default seccomp profile: action %s of %v", s.Action, s.Names)
		}
		for _, name := range s.Names {
			if !slices.Contains(DeniedSyscalls, name) {
				p.Rules = append(p.Rules, SeccompRule{Name: name, Errno: errno, Args: s.Args})
			}
		}
	}
	return p, nil
})
