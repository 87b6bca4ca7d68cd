// Command worker claims runfleet jobs from NATS JetStream and runs each in a fresh sandbox.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runfleet/runfleet/internal/providers/docker"
	"github.com/runfleet/runfleet/internal/providers/namespace"
)

func main() {
	namespace.Init()
	docker.Init()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := run(sigs, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
