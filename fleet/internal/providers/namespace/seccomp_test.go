package namespace

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

const sigchld = uint64(unix.SIGCHLD)

// seccompData is struct seccomp_data as the filter sees it. x/net/bpf's VM loads words big endian
// where the kernel loads them in host order, so each 32-bit word is written big endian here, at
// the offset the kernel gives it: an argument's low word first.
func seccompData(auditArch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[offNr:], nr)
	binary.BigEndian.PutUint32(b[offArch:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[offArgs+8*i+4:], uint32(a>>32))
	}
	return b
}

func runFilter(t *testing.T, vm *bpf.VM, data []byte) uint32 {
	t.Helper()
	got, err := vm.Run(data)
	if err != nil {
		t.Fatalf("filter: %v", err)
	}
	return uint32(got)
}

func action(ret uint32) string {
	switch {
	case ret == retAllow:
		return "allow"
	case ret&0xffff0000 == retErrno:
		return "errno " + unix.ErrnoName(syscall.Errno(ret&0xffff))
	}
	return fmt.Sprintf("%#x", ret)
}

// TestFilterInVM runs the compiled amd64 filter on synthetic calls of each ABI an amd64 kernel
// takes. This machine's kernel refuses int 0x80, so only the program itself can show that i386
// and x32 calls never reach an allow.
func TestFilterInVM(t *testing.T) {
	p, err := sandbox.Seccomp()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := compileSeccomp(p, abi{info: arch.X86_64, x32: true})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("NewVM() error = %v", err)
	}
	t.Logf("allowlist: %d names; filter: %d instructions", len(p.Allowed()), len(prog))
	x64, i386 := uint32(arch.X86_64.ID), uint32(arch.I386.ID)
	eperm, enosys := "errno EPERM", "errno ENOSYS"

	for _, name := range sandbox.DeniedSyscalls {
		if nr, ok := arch.X86_64.SyscallNames[name]; ok {
			if got := action(runFilter(t, vm, seccompData(x64, uint32(nr)))); got != eperm {
				t.Errorf("x86-64 %s = %s, want %s", name, got, eperm)
			}
		} else {
			t.Errorf("x86-64 has no call %s: the denied list names a call the table lacks", name)
		}
		if nr, ok := arch.I386.SyscallNames[name]; ok {
			if got := action(runFilter(t, vm, seccompData(i386, uint32(nr)))); got != enosys {
				t.Errorf("i386 %s = %s, want %s", name, got, enosys)
			}
		}
		if nr, ok := arch.X32.SyscallNames[name]; ok {
			if got := action(runFilter(t, vm, seccompData(x64, uint32(nr)|x32Bit))); got != enosys {
				t.Errorf("x32 %s = %s, want %s", name, got, enosys)
			}
		}
	}
	for _, name := range []string{"read", "write", "exit_group"} {
		if got := action(runFilter(t, vm, seccompData(x64, uint32(arch.X86_64.SyscallNames[name])))); got != "allow" {
			t.Errorf("x86-64 %s = %s, want allow", name, got)
		}
		// The same calls through the other ABIs are refused too: a foreign ABI reaches no rule.
		if got := action(runFilter(t, vm, seccompData(i386, uint32(arch.I386.SyscallNames[name])))); got != enosys {
			t.Errorf("i386 %s = %s, want %s", name, got, enosys)
		}
		if got := action(runFilter(t, vm, seccompData(x64, uint32(arch.X32.SyscallNames[name])|x32Bit))); got != enosys {
			t.Errorf("x32 %s = %s, want %s", name, got, enosys)
		}
	}
	nr := func(name string) uint32 { return uint32(arch.X86_64.SyscallNames[name]) }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"fork-like clone", seccompData(x64, nr("clone"), sigchld), "allow"},
		{"thread clone", seccompData(x64, nr("clone"), unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS), "allow"},
		{"clone with CLONE_NEWUSER", seccompData(x64, nr("clone"), unix.CLONE_NEWUSER|sigchld), eperm},
		{"clone with CLONE_NEWNS", seccompData(x64, nr("clone"), unix.CLONE_NEWNS), eperm},
		{"clone with a flag in the high word", seccompData(x64, nr("clone"), 1<<32|sigchld), "allow"},
		{"clone3", seccompData(x64, nr("clone3")), enosys},
		{"socket AF_VSOCK", seccompData(x64, nr("socket"), unix.AF_VSOCK, unix.SOCK_STREAM), eperm},
		{"socket AF_VSOCK in the low word only", seccompData(x64, nr("socket"), 1<<32|unix.AF_VSOCK), eperm},
		{"socket AF_INET", seccompData(x64, nr("socket"), unix.AF_INET, unix.SOCK_STREAM), "allow"},
		{"socket AF_UNIX", seccompData(x64, nr("socket"), unix.AF_UNIX, unix.SOCK_STREAM), "allow"},
		{"socket AF_INET6", seccompData(x64, nr("socket"), unix.AF_INET6, unix.SOCK_DGRAM), "allow"},
		{"socket AF_NETLINK NETLINK_ROUTE", seccompData(x64, nr("socket"), unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), "allow"},
		{"socket AF_NETLINK NETLINK_NETFILTER", seccompData(x64, nr("socket"), unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER), eperm},
		{"socket AF_NETLINK NETLINK_CRYPTO", seccompData(x64, nr("socket"), unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_CRYPTO), eperm},
		{"socket AF_PACKET", seccompData(x64, nr("socket"), unix.AF_PACKET, unix.SOCK_RAW), eperm},
		{"socket AF_RDS", seccompData(x64, nr("socket"), unix.AF_RDS, unix.SOCK_SEQPACKET), eperm},
		{"socket AF_CAN", seccompData(x64, nr("socket"), unix.AF_CAN, unix.SOCK_RAW), eperm},
		{"socket AF_TIPC", seccompData(x64, nr("socket"), unix.AF_TIPC, unix.SOCK_RDM), eperm},
		{"socket AF_BLUETOOTH", seccompData(x64, nr("socket"), unix.AF_BLUETOOTH, unix.SOCK_STREAM), eperm},
		{"socket AF_KCM", seccompData(x64, nr("socket"), unix.AF_KCM, unix.SOCK_DGRAM), eperm},
		{"socket AF_XDP", seccompData(x64, nr("socket"), unix.AF_XDP, unix.SOCK_RAW), eperm},
		{"socket AF_UNIX in the low word only", seccompData(x64, nr("socket"), 1<<32|unix.AF_UNIX), eperm},
		{"socketpair AF_UNIX", seccompData(x64, nr("socketpair"), unix.AF_UNIX, unix.SOCK_STREAM), "allow"},
		{"socketpair AF_TIPC", seccompData(x64, nr("socketpair"), unix.AF_TIPC, unix.SOCK_DGRAM), eperm},
		{"io_setup", seccompData(x64, nr("io_setup"), 128), eperm},
		{"io_submit", seccompData(x64, nr("io_submit")), eperm},
		{"io_pgetevents", seccompData(x64, nr("io_pgetevents")), eperm},
		{"unknown number", seccompData(x64, 4000), eperm},
		{"number past every table", seccompData(x64, x32Bit-1), eperm},
		{"another arch", seccompData(uint32(arch.AARCH64.ID), 63), enosys},
	} {
		if got := action(runFilter(t, vm, c.data)); got != c.want {
			t.Errorf("%s = %s, want %s", c.name, got, c.want)
		}
	}
	// Every call the policy allows unconditionally is allowed by the program, and every number
	// the policy does not name is refused.
	allowed := map[int]bool{}
	for _, r := range p.Rules {
		if nr, ok := arch.X86_64.SyscallNames[r.Name]; ok && r.Errno == 0 && len(r.Args) == 0 {
			allowed[nr] = true
		}
	}
	named := map[int]bool{}
	for _, r := range p.Rules {
		named[arch.X86_64.SyscallNames[r.Name]] = true
	}
	for nr := range 512 {
		got := action(runFilter(t, vm, seccompData(x64, uint32(nr))))
		switch {
		case allowed[nr] && got != "allow":
			t.Errorf("x86-64 %s (%d) = %s, want allow", arch.X86_64.SyscallNumbers[nr], nr, got)
		case !named[nr] && got != eperm:
			t.Errorf("x86-64 %s (%d) = %s, want %s", arch.X86_64.SyscallNumbers[nr], nr, got, eperm)
		}
	}
}
