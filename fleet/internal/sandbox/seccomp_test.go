package sandbox

import (
	"slices"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSeccompPolicy(t *testing.T) {
	p, err := Seccomp()
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultErrno != syscall.EPERM || p.ForeignErrno != syscall.ENOSYS {
		t.Errorf("DefaultErrno, ForeignErrno = %v, %v; want EPERM, ENOSYS", p.DefaultErrno, p.ForeignErrno)
	}
	allowed := p.Allowed()
	for _, name := range DeniedSyscalls {
		for _, r := range p.Rules {
			if r.Name == name {
				t.Errorf("rule for denied call %s: %+v", name, r)
			}
		}
	}
	for _, name := range []string{"read", "write", "exit_group", "clone", "socket", "execve", "wait4"} {
		if !slices.Contains(allowed, name) {
			t.Errorf("Allowed() lacks %s", name)
		}
	}
	// socket and socketpair are allowed only for SocketFamilies, each rule naming its family.
	for _, r := range p.Rules {
		if r.Name != "socket" && r.Name != "socketpair" {
			continue
		}
		if r.Errno != 0 {
			continue
		}
		if len(r.Args) == 0 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo || !slices.Contains(SocketFamilies, r.Args[0].Value) {
			t.Errorf("%s rule %+v allows a family outside SocketFamilies", r.Name, r.Args)
		}
	}
	t.Logf("allowlist: %d names (every architecture Docker knows)", len(allowed))
}
