package lease_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/lease"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// BenchmarkFencing measures what the lease costs one job that runs to the end — claim, reserve,
// associate and settle, four Redis round trips — against four plain SETs on the same server, for
// each persistence setting docs/operations.md discusses, and with a replica that each reservation waits
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
					c, err := s.Claim(ctx, "default", id, "w", lease.Delivery{Count: 1, QueuedAt: time.Now()})
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
// three (each with a replica): whether claims spread over the shards scale
// (`go test -run '^$' -bench ClaimsOnShards -benchtime 3s ./internal/lease/`).
//
// On 2 cores the masters, their replicas and the client share the CPU, so the free runs cannot
// show scaling; they report the busiest master's CPU per job, which bounds claims on a host with
// a core per master. The capped runs then give each master the same fixed CPU budget (a tenth of
// a core, by its cgroup): Redis is the bottleneck, as on a fleet of many workers, and jobs/s of
// three shards against one is the scaling itself.
func BenchmarkClaimsOnShards(b *testing.B) {
	for _, shards := range []int{1, 3} {
		// Started once: b.Run calls its function again for each b.N it tries.
		cl := testenv.StartCluster(b, shards, 5*time.Second)
		s := lease.NewStore(cl.Client(), lease.Options{Prefix: "shards", TTL: 10 * time.Second, Replicas: 1})
		if err := s.Init(b.Context()); err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		run := func(b *testing.B, parallelism int) {
			ctx := b.Context()
			cpu0 := mastersCPU(b, cl)
			b.SetParallelism(parallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := "job-" + strconv.FormatInt(n.Add(1), 10)
					c, err := s.Claim(ctx, "default", id, "w", lease.Delivery{Count: 1, QueuedAt: time.Now()})
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
		}
		// 16 goroutines on 2 cores: a worker's claim loops and slots.
		b.Run(strconv.Itoa(shards)+"-shards", func(b *testing.B) { run(b, 8) })
		for _, m := range cl.Masters {
			capCPU(b, m, 1_000, 10_000)
		}
		// 128 goroutines, as of many workers: enough to keep three capped masters busy.
		b.Run(strconv.Itoa(shards)+"-shards-0.1-core-each", func(b *testing.B) { run(b, 64) })
	}
}

// capCPU holds a Redis server to quota µs of CPU per period µs: its process moves into a cgroup
// of its own (cgroup v1's cpu controller or v2's cpu.max), and back out at the benchmark's end.
func capCPU(b *testing.B, r *testenv.Redis, quota, period int) {
	b.Helper()
	info, err := r.Client().Info(b.Context(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	var pid string
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid = v
		}
	}
	root, limit := "/sys/fs/cgroup", func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0o644)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		root, limit = "/sys/fs/cgroup/cpu", func(dir string) error {
			return errors.Join(
				os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o644),
				os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0o644))
		}
	} else if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
		testenv.Missing(b, "the cgroup v2 cpu controller at the root (%v)", err)
	}
	dir := filepath.Join(root, "runfleet-bench-redis-"+pid)
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.Missing(b, "a cgroup of our own to cap redis-server's CPU (%v; run as root)", err)
	}
	b.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644)
		_ = os.Remove(dir)
	})
	if err := limit(dir); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
		b.Fatal(err)
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
