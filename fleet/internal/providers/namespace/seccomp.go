package namespace

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
)

// Seccomp return values (linux/seccomp.h).
const (
	retAllow = 0x7fff0000
	retErrno = 0x00050000
)

// x32Bit marks a call of the x32 ABI: the x86-64 audit arch, a number with this bit set.
const x32Bit = 0x40000000

// abi is the native system-call ABI a filter is compiled for.
type abi struct {
	info *arch.Info
	x32  bool // amd64: refuse numbers with x32Bit
}

func nativeABI() (abi, error) {
	switch runtime.GOARCH {
	case "amd64":
		return abi{info: arch.X86_64, x32: true}, nil
	case "arm64":
		return abi{info: arch.AARCH64}, nil
	}
	return abi{}, fmt.Errorf("seccomp filter for %s: %w", runtime.GOARCH, sandbox.ErrUnsupported)
}

// Offsets in struct seccomp_data; the kernel loads 32-bit words in host order (little endian
// on the ABIs above), so an argument's low word comes first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// compileSeccomp renders p as a classic BPF program for a: any other audit arch, and on amd64
// any x32 number, gets p.ForeignErrno; a native call is found by a binary search over the numbers
// the policy names, and its rules decide; every other call gets p.DefaultErrno.
func compileSeccomp(p sandbox.SeccompPolicy, a abi) ([]bpf.Instruction, error) {
	byNr := map[int][]sandbox.SeccompRule{}
	for _, r := range p.Rules {
		nr, ok := a.info.SyscallNames[r.Name]
		if !ok {
			continue // a call this ABI does not have (chown32 on x86-64)
		}
		byNr[nr] = append(byNr[nr], r)
	}
	nrs := make([]int, 0, len(byNr))
	for nr := range byNr {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	blocks := make([][]bpf.Instruction, len(nrs))
	for i, nr := range nrs {
		b, err := callBlock(byNr[nr], p.DefaultErrno)
		if err != nil {
			return nil, err
		}
		if len(b) > 255 {
			return nil, fmt.Errorf("seccomp rules for call %d: %d instructions, more than a jump spans", nr, len(b))
		}
		blocks[i] = b
	}
	foreign := bpf.RetConstant{Val: retErrno | uint32(p.ForeignErrno)}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.info.ID), SkipTrue: 1},
		foreign,
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if a.x32 {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1}, foreign)
	}
	prog = append(prog, searchTree(nrs, blocks, p.DefaultErrno)...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter of %d instructions, more than the kernel takes", len(prog))
	}
	return prog, nil
}

// searchTree finds the accumulator's call number among nrs and runs its block; each block ends
// in a return. Long jumps go through an unconditional jump, whose offset is not bounded by 255.
func searchTree(nrs []int, blocks [][]bpf.Instruction, deflt syscall.Errno) []bpf.Instruction {
	if len(nrs) <= 3 {
		var out []bpf.Instruction
		for i, nr := range nrs {
			out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: uint8(len(blocks[i]))})
			out = append(out, blocks[i]...)
		}
		return append(out, bpf.RetConstant{Val: retErrno | uint32(deflt)})
	}
	mid := len(nrs) / 2
	left := searchTree(nrs[:mid], blocks[:mid], deflt)
	right := searchTree(nrs[mid:], blocks[mid:], deflt)
	out := []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(nrs[mid]), SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(left))},
	}
	return append(append(out, left...), right...)
}

// callBlock decides one call: each rule in turn, the first whose conditions hold returns its
// action, and the default answers when none does. A block is short: its jumps fit in 8 bits.
func callBlock(rules []sandbox.SeccompRule, deflt syscall.Errno) ([]bpf.Instruction, error) {
	var out []bpf.Instruction
	for _, r := range rules {
		ret := bpf.RetConstant{Val: retAllow}
		if r.Errno != 0 {
			ret = bpf.RetConstant{Val: retErrno | uint32(r.Errno)}
		}
		var conds []bpf.Instruction
		var fails []int // indexes in conds of jumps whose false branch means "rule does not hold"
		for _, arg := range r.Args {
			c, f, err := argCheck(arg)
			if err != nil {
				return nil, fmt.Errorf("seccomp rule for %s: %w", r.Name, err)
			}
			for _, i := range f {
				fails = append(fails, len(conds)+i)
			}
			conds = append(conds, c...)
		}
		conds = append(conds, ret)
		// A failed condition skips to the instruction after this rule's return.
		for _, i := range fails {
			j := conds[i].(bpf.JumpIf)
			skip := uint8(len(conds) - i - 1)
			if j.SkipTrue == failMark {
				j.SkipTrue = skip
			}
			if j.SkipFalse == failMark {
				j.SkipFalse = skip
			}
			conds[i] = j
		}
		out = append(out, conds...)
		if len(r.Args) == 0 {
			return out, nil // later rules for this call cannot be reached
		}
	}
	return append(out, bpf.RetConstant{Val: retErrno | uint32(deflt)}), nil
}

// failMark stands for "the rule does not hold" in a jump until callBlock knows the distance.
const failMark = 0xff

// argCheck tests one 64-bit argument with 32-bit loads; it returns the instructions and the
// indexes of those jumps that carry a failMark.
func argCheck(a specs.LinuxSeccompArg) ([]bpf.Instruction, []int, error) {
	lo := bpf.LoadAbsolute{Off: offArgs + 8*uint32(a.Index), Size: 4}
	hi := bpf.LoadAbsolute{Off: offArgs + 8*uint32(a.Index) + 4, Size: 4}
	vlo, vhi := uint32(a.Value), uint32(a.Value>>32)
	switch a.Op {
	case specs.OpEqualTo:
		return []bpf.Instruction{hi, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: failMark},
			lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipFalse: failMark}}, []int{1, 3}, nil
	case specs.OpNotEqual:
		return []bpf.Instruction{hi, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2},
			lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipTrue: failMark}}, []int{3}, nil
	case specs.OpMaskedEqual: // (arg & Value) == ValueTwo
		wlo, whi := uint32(a.ValueTwo), uint32(a.ValueTwo>>32)
		return []bpf.Instruction{hi, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: vhi}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: whi, SkipFalse: failMark},
			lo, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: vlo}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: wlo, SkipFalse: failMark}}, []int{2, 5}, nil
	case specs.OpLessThan: // hi < vhi, or hi == vhi and lo < vlo
		return []bpf.Instruction{hi, bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: vhi, SkipTrue: failMark},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: 2},
			lo, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: vlo, SkipTrue: failMark}}, []int{1, 4}, nil
	case specs.OpGreaterEqual: // hi > vhi, or hi == vhi and lo >= vlo
		return []bpf.Instruction{hi, bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: vhi, SkipTrue: 3},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: failMark},
			lo, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: vlo, SkipFalse: failMark}}, []int{2, 4}, nil
	}
	return nil, nil, fmt.Errorf("argument operator %s", a.Op)
}

// filterProgram compiles the sandbox policy for this host, encoded for the supervisor.
func filterProgram() ([]byte, error) {
	p, err := sandbox.Seccomp()
	if err != nil {
		return nil, err
	}
	a, err := nativeABI()
	if err != nil {
		return nil, err
	}
	prog, err := compileSeccomp(p, a)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	return encodeFilter(raw), nil
}

// encodeFilter lays prog out as the kernel's struct sock_filter array, in host order: eight bytes
// an instruction, far less to pass and parse than a JSON object each.
func encodeFilter(prog []bpf.RawInstruction) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// loadFilter sets no_new_privs and installs the encoded program on every thread of the calling
// process.
func loadFilter(prog []byte) error {
	if len(prog) == 0 || len(prog)%8 != 0 {
		return fmt.Errorf("seccomp program of %d bytes", len(prog))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	filter := make([]unix.SockFilter, len(prog)/8)
	for i := range filter {
		in := prog[8*i:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	runtime.KeepAlive(filter)
	return nil
}
