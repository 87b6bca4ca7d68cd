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

// ReapAll waits for every child left, so that none is running once it returns: a supervisor
// that keeps its sandbox after the program ended calls it after killing every other process.
func ReapAll() {
	for {
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
