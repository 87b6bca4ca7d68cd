package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/runner"
	"github.com/runfleet/runfleet/job"
)

// heartbeats publishes this worker's presence every few seconds until ctx ends, for
// `submit workers`.
func heartbeats(ctx context.Context, nc *nats.Conn, s job.Subjects, c *config, profiles profile.Set, r *runner.Runner) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		b, _ := json.Marshal(map[string]any{"id": c.id, "version": version, "provider": c.provider,
			"profiles": profiles.Names(), "queues": c.queues, "slots": c.concurrency, "running": r.Running(),
			"at": time.Now().UTC()})
		_ = nc.Publish(s.Workers(), b)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
