// Command worker claims runfleet jobs from NATS JetStream and runs each in a fresh sandbox.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/runfleet/runfleet/internal/cli"
	"github.com/runfleet/runfleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/internal/providers/namespace"
)

func main() {
	namespace.Init()
	containerinit.Init()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "worker", version, run(sigs, os.Args[1:], os.Getenv, os.Stderr)))
}
