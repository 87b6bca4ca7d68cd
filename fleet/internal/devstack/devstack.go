// Package devstack starts what `worker --dev` needs instead of outside services: an embedded NATS
// JetStream server and a child redis-server, both on loopback and neither durable.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// MaxStore is the file storage the embedded server lets its streams reserve. Every stream
// reserves its bound (the jobs stream 10 GiB) whether or not it holds a byte, and the server's
// own default is three quarters of the disk free at start: on a small disk, or with a few
// prefixes, stream creation failed with "insufficient storage resources". A fixed budget keeps
// the dev stack's behaviour the same on every machine; a disk that does fill still fails writes.
const MaxStore = 1 << 40

// Stack is a running embedded NATS and child Redis.
type Stack struct {
	NATSURL  string
	RedisURL string
	nats     *server.Server
	redis    *exec.Cmd
	redisErr chan error
	dir      string
}

// Start starts NATS at natsURL's host and port, and redis-server on a free loopback port.
func Start(ctx context.Context, natsURL string) (*Stack, error) {
	u, err := url.Parse(natsURL)
	if err != nil {
		return nil, fmt.Errorf("nats url %q: %w", natsURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 4222
	}
	dir, err := os.MkdirTemp("", "runfleet-dev-")
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: dir}
	ns, err := server.NewServer(&server.Options{Host: u.Hostname(), Port: port, JetStream: true,
		StoreDir: dir + "/nats", JetStreamMaxStore: MaxStore, NoLog: true, NoSigs: true})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		s.Stop()
		return nil, fmt.Errorf("embedded nats at %s:%d did not start (is the port taken?)", u.Hostname(), port)
	}
	s.nats, s.NATSURL = ns, ns.ClientURL()
	if err := s.startRedis(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("--dev needs redis-server on PATH (Debian: apt-get install redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.redis = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--daemonize", "no")
	// redis-server keeps its credentials, so the parent-death signal holds: a worker killed with
	// SIGKILL takes its dev Redis with it.
	s.redis.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.redis.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.redisErr = make(chan error, 1)
	go func() { s.redisErr <- s.redis.Wait() }()
	s.RedisURL = "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			return errors.New("child redis-server did not answer in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Stop ends both servers and removes their data.
func (s *Stack) Stop() {
	if s.nats != nil {
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
	}
	if s.redis != nil && s.redis.Process != nil {
		_ = s.redis.Process.Kill()
		<-s.redisErr
	}
	os.RemoveAll(s.dir)
}
