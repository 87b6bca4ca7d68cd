package worker

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/pool"
	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/runner"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// heartbeats publishes this worker's presence every few seconds until ctx ends, and answers
// `submit workers`' ping at once so that it need not wait for a period. It closes answering once
// the server holds its ping subscription, so that "worker started" is logged only when a ping
// finds the worker.
func heartbeats(ctx context.Context, nc *nats.Conn, s job.Subjects, c Config, provider string, profiles profile.Set, r *runner.Runner, warm *pool.Pool, answering chan<- struct{}) {
	base := protocol.Heartbeat{ID: c.ID, Version: c.Version, Arch: runtime.GOARCH, Provider: provider, Cgroup: cgroupVersion(),
		Profiles: profiles.Names(), Queues: strings.Join(c.Queues, ","), Slots: c.Concurrency}
	for _, n := range profiles.Names() {
		p := profiles[n]
		base.Languages = append(base.Languages, protocol.Language{Name: n, Version: p.Version, Aliases: p.Aliases, Packages: p.Packages})
	}
	beat := func() []byte {
		hb := base
		hb.Running, hb.Waiting, hb.At = r.Running(), warm.Waiting(), time.Now().UTC()
		b, _ := json.Marshal(hb)
		return b
	}
	if sub, err := nc.Subscribe(s.WorkersPing(), func(m *nats.Msg) { _ = m.Respond(beat()) }); err == nil {
		defer func() { _ = sub.Unsubscribe() }()
		// Bounded: a server too slow to answer does not hold the start; pings then wait for it.
		flushCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = nc.FlushWithContext(flushCtx)
		cancel()
	}
	close(answering)
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
