package docker

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// nativeArch is the one seccomp architecture a profile lists: runc gives calls of any other
// (i386 and x32 on amd64, arm on arm64) libseccomp's bad-architecture action, which kills.
func nativeArch() (specs.Arch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return specs.ArchX86_64, nil
	case "arm64":
		return specs.ArchAARCH64, nil
	}
	return "", fmt.Errorf("seccomp profile for %s: %w", runtime.GOARCH, sandbox.ErrUnsupported)
}

// seccompProfile renders the sandbox policy as the JSON of Docker's seccomp security option.
// allowENOSYS turns the rules that answer ENOSYS (clone3, so that libc falls back to clone, whose
// flags the policy can check) into allows, for a runtime that answers every errno rule with EPERM
// (runsc's OCI seccomp): the call then reaches the runtime's kernel, which answers it itself.
func seccompProfile(allowENOSYS bool) (string, error) {
	p, err := sandbox.Seccomp()
	if err != nil {
		return "", err
	}
	arch, err := nativeArch()
	if err != nil {
		return "", err
	}
	eperm := uint(p.DefaultErrno)
	out := specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &eperm, Architectures: []specs.Arch{arch}}
	for _, r := range p.Rules {
		s := specs.LinuxSyscall{Names: []string{r.Name}, Action: specs.ActAllow, Args: r.Args}
		if r.Errno != 0 && !(allowENOSYS && r.Errno == syscall.ENOSYS) {
			errno := uint(r.Errno)
			s.Action, s.ErrnoRet = specs.ActErrno, &errno
		}
		// Unconditional rules of one action share a list of names, as in Docker's own profile.
		if n := len(out.Syscalls); n > 0 && len(s.Args) == 0 && len(out.Syscalls[n-1].Args) == 0 &&
			out.Syscalls[n-1].Action == s.Action && slices.Equal(errnos(out.Syscalls[n-1]), errnos(s)) {
			out.Syscalls[n-1].Names = append(out.Syscalls[n-1].Names, r.Name)
			continue
		}
		out.Syscalls = append(out.Syscalls, s)
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func errnos(s specs.LinuxSyscall) []uint {
	if s.ErrnoRet == nil {
		return nil
	}
	return []uint{*s.ErrnoRet}
}
