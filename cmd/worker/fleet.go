package main

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/internal/pool"
	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/runner"
	"github.com/runfleet/runfleet/job"
)

// heartbeat is what a worker tells `submit workers` every few seconds.
type heartbeat struct {
	ID       string    `json:"id"`
	Version  string    `json:"version"`
	Arch     string    `json:"arch"`     // GOARCH: amd64, arm64
	Provider string    `json:"provider"` // namespace or docker
	Cgroup   string    `json:"cgroup"`   // "v1" or "v2": the host's cgroup hierarchy
	Profiles []string  `json:"profiles"`
	Queues   string    `json:"queues"`
	Slots    int       `json:"slots"`
	Running  int       `json:"running"` // slots in use
	Waiting  int       `json:"waiting"` // sandboxes created ahead and idle, across profiles
	At       time.Time `json:"at"`
}

// heartbeats publishes this worker's presence every few seconds until ctx ends, and answers
// `submit workers`' ping at once so that it need not wait for a period.
func heartbeats(ctx context.Context, nc *nats.Conn, s job.Subjects, c *config, provider string, profiles profile.Set, r *runner.Runner, warm *pool.Pool) {
	base := heartbeat{ID: c.id, Version: version, Arch: runtime.GOARCH, Provider: provider, Cgroup: cgroupVersion(),
		Profiles: profiles.Names(), Queues: c.queues, Slots: c.concurrency}
	beat := func() []byte {
		hb := base
		hb.Running, hb.Waiting, hb.At = r.Running(), warm.Waiting(), time.Now().UTC()
		b, _ := json.Marshal(hb)
		return b
	}
	if sub, err := nc.Subscribe(s.Workers()+".ping", func(m *nats.Msg) { _ = m.Respond(beat()) }); err == nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		_ = nc.Publish(s.Workers(), beat())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cgroupVersion tells which hierarchy the host mounts: v2 has cgroup.controllers at its root.
func cgroupVersion() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "v2"
	}
	return "v1"
}
