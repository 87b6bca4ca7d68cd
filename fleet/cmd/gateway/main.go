// Command gateway serves runfleet's HTTP API — native job routes, server-sent events and
// dify-sandbox's routes — over a fleet's NATS subjects.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/runfleet/runfleet/fleet/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "gateway", err))
}
