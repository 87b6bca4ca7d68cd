package docker

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// holds evaluates one argument condition the way libseccomp does, on a 64-bit value.
func holds(t *testing.T, a specs.LinuxSeccompArg, args []uint64) bool {
	t.Helper()
	v := args[a.Index]
	switch a.Op {
	case specs.OpEqualTo:
		return v == a.Value
	case specs.OpNotEqual:
		return v != a.Value
	case specs.OpLessThan:
		return v < a.Value
	case specs.OpLessEqual:
		return v <= a.Value
	case specs.OpGreaterThan:
		return v > a.Value
	case specs.OpGreaterEqual:
		return v >= a.Value
	case specs.OpMaskedEqual:
		return v&a.Value == a.ValueTwo
	}
	t.Fatalf("operator %s", a.Op)
	return false
}

// decide returns the action the profile takes for a native call, as runc's filter would: a rule
// whose name matches and whose conditions all hold applies; else the default action.
func decide(t *testing.T, p specs.LinuxSeccomp, name string, args ...uint64) string {
	t.Helper()
	args = append(args, make([]uint64, 6)...)
	for _, s := range p.Syscalls {
		if !slices.Contains(s.Names, name) {
			continue
		}
		ok := true
		for _, a := range s.Args {
			ok = ok && holds(t, a, args)
		}
		if !ok {
			continue
		}
		if s.Action == specs.ActAllow {
			return "allow"
		}
		return string(s.Action) + " " + unix.ErrnoName(unix.Errno(*s.ErrnoRet))
	}
	errno := uint(unix.EPERM)
	if p.DefaultErrnoRet != nil {
		errno = *p.DefaultErrnoRet
	}
	return string(p.DefaultAction) + " " + unix.ErrnoName(unix.Errno(errno))
}

// TestSeccompProfileJSON checks the profile the provider sends, parsed back from its JSON.
func TestSeccompProfileJSON(t *testing.T) {
	js, err := seccompProfile(false)
	if err != nil {
		t.Fatal(err)
	}
	var p specs.LinuxSeccomp
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(js), &raw)
	if _, ok := raw["archMap"]; ok {
		t.Errorf("profile has an archMap, which would add sub-architectures (i386, x32)")
	}
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("default action = %s %v, want SCMP_ACT_ERRNO EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	// Only the native architecture: calls of i386 and x32 get runc's bad-architecture action.
	want, _ := nativeArch()
	if !slices.Equal(p.Architectures, []specs.Arch{want}) {
		t.Errorf("architectures = %v, want only %s", p.Architectures, want)
	}
	eperm, enosys := "SCMP_ACT_ERRNO EPERM", "SCMP_ACT_ERRNO ENOSYS"
	for _, name := range sandbox.DeniedSyscalls {
		for _, s := range p.Syscalls {
			if s.Action == specs.ActAllow && slices.Contains(s.Names, name) {
				t.Errorf("%s is in an allow rule (%v)", name, s.Args)
			}
		}
		if got := decide(t, p, name); got != eperm {
			t.Errorf("%s = %s, want %s", name, got, eperm)
		}
	}
	for _, c := range []struct {
		name string
		args []uint64
		want string
	}{
		{"read", nil, "allow"},
		{"write", nil, "allow"},
		{"exit_group", nil, "allow"},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, "allow"},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone3", nil, enosys},
		{"socket", []uint64{unix.AF_VSOCK}, eperm},
		{"socket", []uint64{unix.AF_INET}, "allow"},
		{"socket", []uint64{unix.AF_UNIX}, "allow"},
		{"socket", []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, "allow"},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, "allow"},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER}, eperm},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_CRYPTO}, eperm},
		{"socket", []uint64{unix.AF_PACKET}, eperm},
		{"socket", []uint64{unix.AF_RDS}, eperm},
		{"socket", []uint64{unix.AF_CAN}, eperm},
		{"socket", []uint64{unix.AF_TIPC}, eperm},
		{"socket", []uint64{unix.AF_BLUETOOTH}, eperm},
		{"socket", []uint64{unix.AF_KCM}, eperm},
		{"socket", []uint64{unix.AF_XDP}, eperm},
		{"socket", []uint64{unix.AF_ALG}, eperm},
		{"socket", []uint64{1<<32 | unix.AF_UNIX}, eperm},
		{"socketpair", []uint64{unix.AF_UNIX}, "allow"},
		{"socketpair", []uint64{unix.AF_TIPC}, eperm},
		{"io_setup", nil, eperm},
		{"io_submit", nil, eperm},
		{"io_getevents", nil, eperm},
		{"io_pgetevents", nil, eperm},
		{"io_pgetevents_time64", nil, eperm},
		{"no_such_call", nil, eperm},
	} {
		if got := decide(t, p, c.name, c.args...); got != c.want {
			t.Errorf("%s%v = %s, want %s", c.name, c.args, got, c.want)
		}
	}
}
