package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Replicated reports whether a reservation could now be acknowledged as [Options.Replicas] asks,
// by the master's count of replicas in sync ([ReplicasInSync]): nil, or an error that wraps
// [ErrNotReplicated] and says how many are. A caller whose Reserve failed with ErrNotReplicated
// asks it until the replicas are back, rather than fail its jobs.
func (s *Store) Replicated(ctx context.Context) error {
	if s.o.Replicas == 0 {
		return nil
	}
	n, err := ReplicasInSync(ctx, s.rdb)
	if err != nil {
		return err
	}
	if n < s.o.Replicas {
		return fmt.Errorf("%d of %d replicas in sync: %w", n, s.o.Replicas, ErrNotReplicated)
	}
	return nil
}

// maxLag is the most seconds since a replica's last acknowledgement (INFO's lag; a replica
// acknowledges every second) for it to count as in sync.
const maxLag = 2

// ReplicasInSync is the master's count of replicas online and acknowledging; on a Cluster, the
// least of its masters'. A replica still loading its first copy, or one that stalled, does not
// count: it could not acknowledge a reservation in time.
func ReplicasInSync(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		least := -1
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := ReplicasInSync(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if least == -1 || n < least {
				least = n
			}
			return err
		})
		return max(least, 0), err
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return 0, fmt.Errorf("redis replication: %w", err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		// slave0:ip=10.0.0.2,port=6379,state=online,offset=1234,lag=0
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "slave") || name == "slave_read_only" {
			continue
		}
		online, lag := false, -1
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "state":
				online = v == "online"
			case "lag":
				lag, _ = strconv.Atoi(v)
			}
		}
		if online && lag >= 0 && lag <= maxLag {
			n++
		}
	}
	return n, nil
}
