// Command worker claims runfleet jobs from NATS JetStream and runs each in a fresh sandbox.
package main

import (
	"os"
	"syscall"

	"github.com/runfleet/runfleet/fleet/internal/bootstrap"
	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker/containerinit"
	"github.com/runfleet/runfleet/fleet/internal/providers/namespace"
)

func main() {
	namespace.Init()
	containerinit.Init()
	bootstrap.Main()
	ctx, kill, stop := signals(syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, kill, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "worker", err))
}
