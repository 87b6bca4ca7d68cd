package lease_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runfleet/runfleet/internal/lease"
	"github.com/runfleet/runfleet/internal/testenv"
)

// BenchmarkFencing measures what the lease costs one job that runs to the end — claim, reserve,
// associate and settle, four Redis round trips — against four plain SETs on the same server, for
// each persistence setting the README discusses, and with a replica that each reservation waits
// for (WAIT 1, sent in the reserve's round trip):
//
//	go test -run '^$' -bench Fencing -benchtime 2000x ./internal/lease/
func BenchmarkFencing(b *testing.B) {
	for _, p := range []struct {
		name     string
		args     []string
		replicas int
	}{
		{"no-persistence", nil, 0},
		{"aof-everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, 0},
		{"aof-always", []string{"--appendonly", "yes", "--appendfsync", "always"}, 0},
		{"replica-wait", nil, 1},
		{"aof-everysec-replica-wait", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, 1},
	} {
		b.Run(p.name, func(b *testing.B) {
			srv := testenv.StartRedis(b, p.args...)
			if p.replicas > 0 {
				testenv.StartReplica(b, srv, p.args...)
			}
			rdb := srv.Client()
			s := lease.NewStore(rdb, lease.Options{TTL: 10 * time.Second, Replicas: p.replicas})
			ctx := b.Context()
			if err := s.Init(ctx); err != nil {
				b.Fatal(err)
			}
			b.Run("baseline-4-sets", func(b *testing.B) {
				for i := range b.N {
					k := "plain:" + strconv.Itoa(i)
					for range 4 {
						if err := rdb.Set(ctx, k, "v", time.Minute).Err(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			runs := 0
			b.Run("claim-reserve-associate-settle", func(b *testing.B) {
				runs++
				for i := range b.N {
					id := "bench-" + strconv.Itoa(runs) + "-" + strconv.Itoa(i)
					c, err := s.Claim(ctx, id, "w", lease.Delivery{Count: 1, QueuedAt: time.Now()})
					if err != nil {
						b.Fatal(err)
					}
					l := c.Lease
					if err := l.Reserve(ctx, "sha256:x", "sha256:y", "namespace"); err != nil {
						b.Fatal(err)
					}
					if err := l.Associate(ctx, "sb"); err != nil {
						b.Fatal(err)
					}
					if err := l.Settled(ctx, "succeeded"); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(4, "roundtrips/job")
			})
		})
	}
}

// BenchmarkClaimsOnShards: a job's four lease round trips (claim, reserve with WAIT for a
// replica, associate, settle) from 16 goroutines at once, on a Redis Cluster of one master and of
// three (each with a replica): whether claims spread over the shards scale. Compare the two
// runs' jobs/s and the busiest master's CPU per job of one run
// (`go test -run '^$' -bench ClaimsOnShards -benchtime 3s ./internal/lease/`).
func BenchmarkClaimsOnShards(b *testing.B) {
	for _, shards := range []int{1, 3} {
		// Started once: b.Run calls its function again for each b.N it tries.
		cl := testenv.StartCluster(b, shards, 5*time.Second)
		s := lease.NewStore(cl.Client(), lease.Options{Prefix: "shards", TTL: 10 * time.Second, Replicas: 1})
		if err := s.Init(b.Context()); err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		b.Run(strconv.Itoa(shards)+"-shards", func(b *testing.B) {
			ctx := b.Context()
			cpu0 := mastersCPU(b, cl)
			b.SetParallelism(8) // 16 goroutines on 2 cores: a worker's claim loops and slots
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := "job-" + strconv.FormatInt(n.Add(1), 10)
					c, err := s.Claim(ctx, id, "w", lease.Delivery{Count: 1, QueuedAt: time.Now()})
					if err != nil {
						b.Error(err)
						return
					}
					l := c.Lease
					if err := l.Reserve(ctx, "sha256:x", "sha256:y", "namespace"); err != nil {
						b.Error(err)
						return
					}
					if err := l.Associate(ctx, "sb"); err != nil {
						b.Error(err)
						return
					}
					if err := l.Settled(ctx, "succeeded"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			// On 2 cores the shards share the CPU with the client and cannot show throughput
			// scaling; the busiest master's CPU per job is what bounds claims on a host with a
			// core per master, and it should fall with the shard count.
			var sum, busiest time.Duration
			for i, d := range mastersCPU(b, cl) {
				sum += d - cpu0[i]
				busiest = max(busiest, d-cpu0[i])
			}
			b.ReportMetric(float64(sum.Microseconds())/float64(b.N), "µs-redis-cpu/job")
			b.ReportMetric(float64(busiest.Microseconds())/float64(b.N), "µs-busiest-master-cpu/job")
		})
	}
}

// mastersCPU is the CPU time (user and system, from INFO) each master of cl has used so far.
func mastersCPU(b *testing.B, cl *testenv.Cluster) []time.Duration {
	var out []time.Duration
	for _, m := range cl.Masters {
		info, err := m.Client().Info(b.Context(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		for line := range strings.SplitSeq(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				sec, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %s: %v", line, err)
				}
				d += time.Duration(sec * float64(time.Second))
			}
		}
		out = append(out, d)
	}
	return out
}
