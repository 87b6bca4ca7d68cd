package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of child redis-servers on loopback: Masters[i] serves the i-th
// third of the hash slots and Replicas[i] replicates it.
type Cluster struct {
	t        testing.TB
	Masters  []*Redis
	Replicas []*Redis
	URL      string // redis+cluster://… naming every node
}

// StartCluster starts masters redis-servers in cluster mode, each with a replica, joins them and
// returns once every slot is served and every replica is in sync. nodeTimeout is
// cluster-node-timeout: how long a master may be silent before its replica takes over.
func StartCluster(t testing.TB, masters int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", fmt.Sprint(nodeTimeout.Milliseconds())}
	var addrs []string
	for range masters {
		c.Masters = append(c.Masters, StartRedis(t, args...))
	}
	for range masters {
		c.Replicas = append(c.Replicas, StartRedis(t, args...))
	}
	ctx := context.Background()
	ids := map[*Redis]string{}
	clients := map[*Redis]*redis.Client{}
	for _, r := range c.all() {
		addrs = append(addrs, r.Addr)
		clients[r] = r.Client()
		id, err := clients[r].ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("cluster myid of %s: %v", r.Addr, err)
		}
		ids[r] = id
	}
	c.URL = "redis+cluster://" + strings.Join(addrs, ",")
	first := c.Masters[0]
	host, port := splitAddr(first.Addr)
	for _, r := range c.all()[1:] {
		if err := clients[r].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("cluster meet %s: %v", r.Addr, err)
		}
	}
	per := 16384 / masters
	for i, m := range c.Masters {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := clients[m].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("cluster addslotsrange on %s: %v", m.Addr, err)
		}
	}
	// A replica can follow a master only once it knows the master's node.
	for i, r := range c.Replicas {
		master := ids[c.Masters[i]]
		WaitFor(t, 30*time.Second, "replica "+r.Addr+" knows its master", func() bool {
			nodes, err := clients[r].ClusterNodes(ctx).Result()
			return err == nil && strings.Contains(nodes, master)
		})
		if err := clients[r].Do(ctx, "CLUSTER", "REPLICATE", master).Err(); err != nil {
			t.Fatalf("cluster replicate on %s: %v", r.Addr, err)
		}
	}
	for _, r := range c.all() {
		WaitFor(t, 60*time.Second, "cluster state ok on "+r.Addr, func() bool {
			info, err := clients[r].ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", 2*masters))
		})
	}
	for _, r := range c.Replicas {
		WaitFor(t, 60*time.Second, "replica "+r.Addr+" in sync", func() bool {
			info, err := clients[r].Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up")
		})
	}
	return c
}

func (c *Cluster) all() []*Redis { return append(append([]*Redis{}, c.Masters...), c.Replicas...) }

// Client returns a cluster client of every node, closed with the test.
func (c *Cluster) Client() *redis.ClusterClient {
	var addrs []string
	for _, r := range c.all() {
		addrs = append(addrs, r.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

func splitAddr(addr string) (string, string) {
	host, port, _ := strings.Cut(addr, ":")
	return host, port
}
