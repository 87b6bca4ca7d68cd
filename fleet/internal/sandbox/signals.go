package sandbox

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UnignoreInherited makes every signal the calling process inherited as ignored a caught one,
// dropped, so that a program it execs starts with that signal at its default: an ignored signal
// stays ignored across exec, a caught one does not. A sandbox's supervisor calls it first, since
// its own parent (a worker started by a shell that ignored SIGHUP, a cgo test binary that ignores
// signal 32) may have passed ignores down that no job should inherit.
func UnignoreInherited() {
	// Never read: signal.Notify does not block on a full channel, and the signals are dropped.
	c := make(chan os.Signal, 1)
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		switch {
		case sig == syscall.SIGKILL || sig == syscall.SIGSTOP || !signal.Ignored(sig):
		case sig == 32 || sig == 33:
			// The C library's own two, which the runtime neither catches nor lets Notify take:
			// set to the default directly (nothing sends them to a supervisor).
			setDefault(sig)
		default:
			signal.Notify(c, sig)
		}
	}
}

// setDefault sets sig's disposition to SIG_DFL with the raw system call.
func setDefault(sig syscall.Signal) {
	var act struct {
		handler  uintptr // SIG_DFL
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}
