package sandbox

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// A sandbox's supervisor (the namespace provider's pid 1, the Docker provider's container init)
// is counted in the sandbox's limits; these are added to what the job asked for, so the program
// keeps its share.
const (
	SupervisorTasks  = 8       // threads of the supervisor, in the pids limit: see HoldThreads
	SupervisorMemory = 8 << 20 // bytes, in the memory limit
)

// ReapUntil waits for the process pid, a child of the caller, and returns its status. A
// supervisor is pid 1 of its sandbox and adopts every orphan, so it reaps any child meanwhile,
// lest zombies hold the sandbox's pids.
func ReapUntil(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if got == pid {
			return ws, nil
		}
	}
}

// KillAll kills every other process of the sandbox and reaps them until none is left, so that
// none is running once it returns: a supervisor, pid 1 of its sandbox, calls it when the program
// ended. It kills again before each wait: one kill does not do on every kernel. gVisor lets a
// process forked while kill(-1) runs escape it (a daemon that double-forks as its parent exits
// did), and a wait for it alone would wait forever. An escapee's parent was killed by that kill,
// and the kill after its reaping finds the escapee.
func KillAll() {
	for {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil && err != syscall.EINTR {
			return
		}
	}
}

// HoldThreads has the Go runtime start threads until the process has n, and leaves them idle for
// the runtime to take when it needs one; it never ends an idle thread. A supervisor calls it with
// SupervisorTasks before it starts the program, so that the part of the sandbox's pids limit
// counted for it is its own: a program that forks until refused takes every task the
// supervisor has not started by then, and a Go runtime that needs a thread and cannot start one
// dies ("failed to create new OS thread"), and the job's status with it. The supervisor's few
// goroutines never need as many threads at once.
func HoldThreads(n int) {
	for range 4 { // an idle thread taken again adds none: count and start the rest
		have := threads()
		if have <= 0 || have >= n {
			return
		}
		// A goroutine locked to its thread keeps it from every other goroutine: each of these
		// has one of its own, started for it while the others wait.
		var locked, release sync.WaitGroup
		release.Add(1)
		for range n - have {
			locked.Add(1)
			go func() {
				runtime.LockOSThread()
				locked.Done()
				release.Wait()
				runtime.UnlockOSThread()
			}()
		}
		locked.Wait()
		release.Done()
	}
}

// threads is this process's thread count, or 0 when /proc cannot tell.
func threads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nThreads:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return 0
	}
	return n
}
