// Command submit sends a runfleet job and streams its output, or watches, cancels and benchmarks
// jobs.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGPIPE is caught so that a closed standard output (submit … | head) is a write error that
	// cancels the job, not a silent death that leaves it running.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	os.Exit(run(sigs, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
