package testenv

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/devstack"
)

// NATS is an embedded JetStream server with file storage in a temporary directory.
type NATS struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
	URL  string
}

// StartNATS starts an embedded JetStream server on a free loopback port.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	return StartNATSWith(t, nil)
}

// StartNATSWith is StartNATS with configure applied to the server's options first (users and
// their permissions, say). Connections then need what configure asks for: URL has none of it.
func StartNATSWith(t testing.TB, configure func(*server.Options)) *NATS {
	t.Helper()
	n := &NATS{t: t, opts: server.Options{Host: "127.0.0.1", Port: FreePort(t), JetStream: true,
		StoreDir: t.TempDir(), JetStreamMaxStore: devstack.MaxStore, NoLog: true, NoSigs: true}}
	if configure != nil {
		configure(&n.opts)
	}
	n.start()
	t.Cleanup(n.Stop)
	return n
}

func (n *NATS) start() {
	n.t.Helper()
	opts := n.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		n.t.Fatalf("nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats server not ready in 10s")
	}
	n.srv = srv
	n.URL = srv.ClientURL()
}

// Stop shuts the server down; its file storage stays for Restart.
func (n *NATS) Stop() {
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// Restart stops the server and starts it again on the same port and storage.
func (n *NATS) Restart() {
	n.t.Helper()
	n.Stop()
	n.start()
}

// Conn returns a connection that reconnects forever, closed with the test.
func (n *NATS) Conn() *nats.Conn {
	n.t.Helper()
	nc, err := nats.Connect(n.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		n.t.Fatalf("connect nats: %v", err)
	}
	n.t.Cleanup(nc.Close)
	return nc
}

// StartNATSCluster starts n embedded JetStream servers routed into one cluster and returns their
// client URLs once each accepts connections. The cluster elects its meta leader in the
// background: callers wait for the JetStream API to answer.
func StartNATSCluster(t testing.TB, n int) []string {
	t.Helper()
	ports := make([]int, n)
	var routes []*url.URL
	for i := range n {
		ports[i] = FreePortNumber()
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	urls := make([]string, n)
	for i := range n {
		urls[i] = StartNATSWith(t, func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i)
			o.Cluster = server.ClusterOpts{Name: "runfleet-test", Host: "127.0.0.1", Port: ports[i]}
			o.Routes = routes
		}).URL
	}
	return urls
}
