// Command submit sends a runfleet job and streams its output, or watches, cancels and benchmarks
// jobs.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(sigs, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
