package queue

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/devstack"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/job"
	"github.com/runfleet/runfleet/protocol"
)

// startCluster runs a 3-node JetStream cluster of embedded servers on loopback, stopped with the
// test, and returns a connection to it.
func startCluster(t *testing.T) *nats.Conn {
	t.Helper()
	var routes []string
	ports := make([]int, 3)
	for i := range ports {
		ports[i] = testenv.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var urls []string
	for i := range ports {
		opts := &server.Options{ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: testenv.FreePort(t),
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: devstack.MaxStore, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "rfq", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ","))}
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("node %d not ready in 10s", i)
		}
		urls = append(urls, srv.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestRetryMeetsItsOwnPendingWrite: on a cluster, a write whose Nats-Msg-Id is still being
// proposed by an earlier try of the same write is answered 409 / 10158 "duplicate message id is
// in process". Two tries of one write are sent at once, as a retry after a lost ack is: both
// end with the one stored message, neither fails.
func TestRetryMeetsItsOwnPendingWrite(t *testing.T) {
	nc := startCluster(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := job.NewSubjects("")
	testenv.WaitFor(t, time.Minute, "the cluster's streams made", func() bool {
		return protocol.EnsureStreams(t.Context(), js, s, protocol.StreamOptions{Replicas: 3}) == nil
	})
	r := NewResults(js, s)
	for i := range 30 {
		id := fmt.Sprintf("pending-%d", i)
		tries := [2]*Chain{r.Chain("default", id, 1, ""), r.Chain("default", id, 1, "")}
		var errs [2]error
		var wg sync.WaitGroup
		for k, c := range tries {
			wg.Go(func() { errs[k] = c.Page(t.Context(), job.Stdout, 0, 0, []byte("x")) })
		}
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				t.Fatalf("write %d, try %d: %v", i, k, err)
			}
		}
		if tries[0].last != tries[1].last {
			t.Fatalf("write %d: the tries went on from sequences %d and %d, want the one stored", i, tries[0].last, tries[1].last)
		}
	}
}
