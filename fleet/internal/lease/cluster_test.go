package lease_test

import (
	"cmp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestLeaseOnCluster runs the suite on a Redis Cluster of three masters with a replica each:
// every script touches the keys of one hash slot, or the cluster refuses it with CROSSSLOT.
func TestLeaseOnCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3, 5*time.Second)
	rdb := cl.Client()
	newStore := storeOn(rdb)
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore) })
	}
	t.Run("ClaimsSpreadOverShards", func(t *testing.T) { testClaimsSpread(t, cl, rdb) })
	t.Run("ReserveWaitsForAReplica", func(t *testing.T) {
		const prefix = "wait"
		var ids []string
		for i := 0; len(ids) < 2; i++ {
			if id := "job-" + strconv.Itoa(i); shardOf(t, cl, rdb, keyspace.New(prefix).Record("default", id)) == 0 {
				ids = append(ids, id)
			}
		}
		s := lease.NewStore(rdb, lease.Options{Prefix: prefix, Replicas: 1, ReplicaWait: 500 * time.Millisecond})
		testReserveWaits(t, s, prefix, cl.Replicas[0], ids[0], ids[1])
	})
	// Last: it empties a shard.
	t.Run("LostShardStartsItsOwnEpochs", func(t *testing.T) { testLostShard(t, cl, rdb) })
}

// shardOf is the index in cl.Masters of the master that serves key.
func shardOf(t *testing.T, cl *testenv.Cluster, rdb *redis.ClusterClient, key string) int {
	t.Helper()
	m, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range cl.Masters {
		if r.Addr == m.Options().Addr {
			return i
		}
	}
	t.Fatalf("key %s is served by %s, not one of the masters", key, m.Options().Addr)
	return -1
}

func testClaimsSpread(t *testing.T, cl *testenv.Cluster, rdb *redis.ClusterClient) {
	const jobs = 3000
	s := lease.NewStore(rdb, lease.Options{Prefix: "spread"})
	for i := range jobs {
		if _, err := s.Claim(t.Context(), "default", "job-"+strconv.Itoa(i), "w", lease.Delivery{Count: 1, QueuedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var counts []int64
	for _, m := range cl.Masters {
		var n int64
		iter := m.Client().Scan(t.Context(), 0, "spread:*:job:*", 1000).Iterator()
		for iter.Next(t.Context()) {
			n++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, n)
	}
	t.Logf("records per shard after %d claims: %v", jobs, counts)
	for i, n := range counts {
		// An even spread is 1,000 a shard; a shard with under 800 or over 1,200 is skewed.
		if n < jobs/3*8/10 || n > jobs/3*12/10 {
			t.Errorf("shard %d holds %d of %d records, want about a third (per shard: %v)", i, n, jobs, counts)
		}
	}
}

// testLostShard empties one shard (master and replica, as a restart of both without persistence
// would): a redelivered job of that shard's buckets is record_lost, one of another shard still
// runs, since its bucket's epoch survived.
func testLostShard(t *testing.T, cl *testenv.Cluster, rdb *redis.ClusterClient) {
	const prefix = "lost"
	s := lease.NewStore(rdb, lease.Options{Prefix: prefix, Skew: time.Millisecond})
	ctx := t.Context()
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	// One job on shard 0 and one elsewhere.
	var lostID, keptID string
	for i := 0; lostID == "" || keptID == ""; i++ {
		id := "job-" + strconv.Itoa(i)
		if shardOf(t, cl, rdb, keyspace.New(prefix).Record("default", id)) == 0 {
			lostID = cmp.Or(lostID, id)
		} else {
			keptID = cmp.Or(keptID, id)
		}
	}
	epochMS, err := rdb.Get(ctx, keyspace.New(prefix).Epoch(keyspace.Bucket("default", keptID))).Int64()
	if err != nil {
		t.Fatal(err)
	}
	// Both jobs were stored after Init and are redelivered without a record: on an intact shard
	// such a job was never claimed.
	queued := time.UnixMilli(epochMS + 50)
	testenv.WaitFor(t, 10*time.Second, "redis time past the jobs' store time", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.After(queued.Add(50*time.Millisecond))
	})
	master := cl.Masters[0].Client()
	if err := master.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d := lease.Delivery{Count: 2, QueuedAt: queued}
	if got := claim(t, s, lostID, "w", d).Mode; got != lease.ModeRecordLost {
		t.Errorf("Claim() of a job of the emptied shard = %s, want %s", got, lease.ModeRecordLost)
	}
	if got := claim(t, s, keptID, "w", d).Mode; got != lease.ModeRun {
		t.Errorf("Claim() of a job of an intact shard = %s, want %s", got, lease.ModeRun)
	}
	for b := range keyspace.Buckets {
		key := keyspace.New(prefix).Epoch(b)
		if shardOf(t, cl, rdb, key) == 0 {
			continue
		}
		if got, err := rdb.Get(ctx, key).Int64(); err != nil || got != epochMS {
			t.Fatalf("epoch of bucket %d on an intact shard = %d, %v; want %d unchanged", b, got, err, epochMS)
		}
	}
	keys, err := master.Keys(ctx, prefix+":*:epoch3").Result()
	if err != nil || len(keys) != 1 || !strings.Contains(keys[0], "{b"+strconv.Itoa(keyspace.Bucket("default", lostID))+"}") {
		t.Errorf("epochs on the emptied shard = %v, %v; want only the claimed job's bucket's, new", keys, err)
	}
}
