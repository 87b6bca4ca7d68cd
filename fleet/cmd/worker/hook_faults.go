//go:build faults

package main

import (
	"flag"
	"os"
	"syscall"
)

// faultHook registers --crash-at, with which the worker kills itself with SIGKILL when a job
// reaches the phase named. Only the fault tests' builds (`go build -tags faults`) have it.
func faultHook(fs *flag.FlagSet) func() func(string) {
	at := fs.String("crash-at", "", "testing only: SIGKILL itself at phase claimed|reserved|associated|gate|running|collected|settled")
	return func() func(string) {
		if *at == "" {
			return nil
		}
		return func(phase string) {
			if phase == *at {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
}
