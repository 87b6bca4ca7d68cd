package sandbox

import "syscall"

// A sandbox's supervisor (the namespace provider's pid 1, the Docker provider's container init)
// is counted in the sandbox's limits; these are added to what the job asked for, so the program
// keeps its share.
const (
	SupervisorTasks  = 8       // threads of the supervisor, in the pids limit
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
