package sandbox

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// SocketFamilies are the only address families a sandbox may create sockets of: what python3,
// nodejs and their libraries use (local sockets, IP on the sandbox's loopback, netlink routing
// for the interface list). Creating a socket of any other family makes the kernel load that
// family's module, each one more kernel surface (Docker allows 27 more: RDS, CAN, TIPC, KCM...).
// Netlink is allowed for NETLINK_ROUTE only, for the same reason: other netlink protocols load
// modules too (nfnetlink, crypto_user, inet_diag).
var SocketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// socketRules allow socket for each of [SocketFamilies] and socketpair for AF_UNIX, the one family
// that pairs; anything else gets the policy's default errno.
func socketRules() []SeccompRule {
	var out []SeccompRule
	for _, f := range SocketFamilies {
		args := []specs.LinuxSeccompArg{{Index: 0, Value: f, Op: specs.OpEqualTo}}
		if f == unix.AF_NETLINK {
			args = append(args, specs.LinuxSeccompArg{Index: 2, Value: unix.NETLINK_ROUTE, Op: specs.OpEqualTo})
		}
		out = append(out, SeccompRule{Name: "socket", Args: args})
	}
	return append(out, SeccompRule{Name: "socketpair", Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_UNIX, Op: specs.OpEqualTo}}})
}

// limitRules allow setrlimit and prlimit64 for every limit but RLIMIT_CORE, which a job may read
// and never set: the sandbox sets it to 1, and a job that lowered it to 0 would have a crash start a
// pipe core_pattern's helper as root outside the sandbox (the kernel skips pipes only at 1).
func limitRules() []SeccompRule {
	notCore := specs.LinuxSeccompArg{Index: 0, Value: unix.RLIMIT_CORE, Op: specs.OpNotEqual}
	return []SeccompRule{
		{Name: "setrlimit", Args: []specs.LinuxSeccompArg{notCore}},
		// prlimit64(pid, resource, new, old): any resource but the core's, or no new limit.
		{Name: "prlimit64", Args: []specs.LinuxSeccompArg{{Index: 1, Value: unix.RLIMIT_CORE, Op: specs.OpNotEqual}}},
		{Name: "prlimit64", Args: []specs.LinuxSeccompArg{{Index: 2, Value: 0, Op: specs.OpEqualTo}}},
	}
}

// dropped are the calls whose rules in Docker's profile are replaced or left out: the denied
// calls, the 32-bit-only variant of a denied one, and the calls socketRules and limitRules decide.
var dropped = append(slices.Clone(DeniedSyscalls), "io_pgetevents_time64", "socket", "socketpair", "setrlimit", "prlimit64")

// SeccompPolicy is the one system-call policy of every sandbox, whatever the provider: Docker's
// default allowlist for a process without capabilities, less [DeniedSyscalls], with socket and
// socketpair narrowed to [SocketFamilies] and setting RLIMIT_CORE refused. Providers render
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
			if !slices.Contains(dropped, name) {
				p.Rules = append(p.Rules, SeccompRule{Name: name, Errno: errno, Args: s.Args})
			}
		}
	}
	p.Rules = append(p.Rules, socketRules()...)
	p.Rules = append(p.Rules, limitRules()...)
	return p, nil
})
