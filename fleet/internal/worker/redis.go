package worker

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/lease"
)

// replicasToWait is how many replicas must acknowledge each reservation before its job is
// dispatched: one when the Redis has a replica at start (on a Cluster, every master), or when
// Sentinel watches it (a master Sentinel may replace has a replica to replace it with); a
// failover can then lose no dispatch. Without one, the log says what a crash costs. While the
// replica is missing later (a failover promoted the only one, the replica died), the runner
// claims nothing, unless --dispatch-without-replica says to go on without it.
func replicasToWait(ctx context.Context, log *slog.Logger, rdb redis.UniversalClient, sentinel bool) int {
	n, err := lease.ReplicasInSync(ctx, rdb)
	if err != nil {
		log.Warn("redis replication unknown", "err", err)
	}
	if n == 0 && !sentinel {
		log.Warn("redis has no replica: if it crashes, the writes it had not saved are lost and the jobs running then settle unknown (never run twice); give it a replica and min-replicas-to-write 1")
		return 0
	}
	log.Info("each dispatch waits for a replica to hold its reservation", "replicas_connected", n)
	return 1
}
