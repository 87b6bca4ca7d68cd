package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestReserveWaitsForAReplica: with a replica to wait for, Reserve returns only once the replica
// holds the reservation, and with the replica stalled it refuses with ErrNotReplicated, leaving
// the job to be released undispatched (its next claim runs it).
func TestReserveWaitsForAReplica(t *testing.T) {
	master := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, master)
	s := lease.NewStore(master.Client(), lease.Options{Replicas: 1, ReplicaWait: 500 * time.Millisecond})
	testReserveWaits(t, s, "runfleet", replica, "acked", "unacked")
}

// testReserveWaits reserves job acked, then job unacked with replica (which replicates both
// jobs' keys) stalled.
func testReserveWaits(t *testing.T, s *lease.Store, prefix string, replica *testenv.Redis, acked, unacked string) {
	ctx := t.Context()
	l := claim(t, s, acked, "w1", lease.Delivery{}).Lease
	if err := l.Reserve(ctx, "p", "d", "x"); err != nil {
		t.Fatalf("Reserve() with the replica in sync error = %v", err)
	}
	// Asked right after Reserve returned, the replica already holds the reservation.
	var state *redis.StringCmd
	// A Cluster replica answers reads only on a READONLY connection; a plain one refuses READONLY.
	_, _ = replica.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ReadOnly(ctx)
		state = p.HGet(ctx, keyspace.New(prefix).Record("default", acked), "state")
		return nil
	})
	if got, err := state.Result(); err != nil || got != "reserved" {
		t.Errorf("replica's record state = %q, %v; want reserved", got, err)
	}

	replica.Pause()
	defer replica.Resume()
	l = claim(t, s, unacked, "w1", lease.Delivery{}).Lease
	start := time.Now()
	err := l.Reserve(ctx, "p", "d", "x")
	if !errors.Is(err, lease.ErrNotReplicated) {
		t.Fatalf("Reserve() with the replica stalled error = %v, want ErrNotReplicated", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Reserve() took %v with a stalled replica, want about the replica wait", took)
	}
	if _, err := l.Release(ctx, false); err != nil {
		t.Fatalf("Release() after ErrNotReplicated error = %v", err)
	}
	if got := claim(t, s, unacked, "w2", lease.Delivery{Count: 2, QueuedAt: time.Now()}).Mode; got != lease.ModeRun {
		t.Errorf("Claim() after a released unreplicated reservation = %s, want %s", got, lease.ModeRun)
	}
}
