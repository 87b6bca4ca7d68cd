package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server child process that lives as long as its test.
type Redis struct {
	t    testing.TB
	Addr string
	URL  string
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port, with no persistence unless args add it.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server on PATH (Debian package redis-server)")
	}
	r := &Redis{t: t, dir: t.TempDir()}
	// A port free a moment ago may be taken by another test process before the server binds it:
	// then the server exits at once, and another port is tried.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		r.Addr = "127.0.0.1:" + strconv.Itoa(port)
		r.URL = "redis://" + r.Addr + "/0"
		r.args = append([]string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", r.dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"}, args...)
		err = r.launch()
		if err == nil {
			break
		}
		if !errors.Is(err, errExited) || attempt == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(r.Stop)
	return r
}

// errExited is a server that ended before it answered.
var errExited = errors.New("redis-server exited before it answered")

func (r *Redis) start() {
	r.t.Helper()
	if err := r.launch(); err != nil {
		r.t.Fatal(err)
	}
}

// launch starts the server and waits until it answers: up to 30 s, for a loaded machine.
func (r *Redis) launch() error {
	r.cmd = exec.Command(r.args[0], r.args[1:]...)
	r.cmd.Dir = r.dir
	// A test binary killed on its timeout runs no cleanup: the server must go with it.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr Buffer
	r.cmd.Stdout, r.cmd.Stderr = &stderr, &stderr
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(r.cmd, r.done)
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		select {
		case <-r.done:
			r.cmd = nil
			return fmt.Errorf("%w at %s: %s", errExited, r.Addr, lastLines(stderr.String(), 3))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server at %s did not answer in 30s", r.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " / ")
}

// Stop ends the server; its data is gone unless persistence was configured.
func (r *Redis) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Pause stops the server's process (SIGSTOP): it holds its connections and answers nothing, as
// a hung or partitioned Redis would, until Resume.
func (r *Redis) Pause() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("pause redis-server: %v", err)
	}
}

// Resume continues a paused server.
func (r *Redis) Resume() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.t.Fatalf("resume redis-server: %v", err)
	}
}

// Restart stops the server and starts it again on the same port: empty, without persistence.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Stop()
	r.start()
}

// Client returns a client of the server, closed with the test.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
	r.t.Cleanup(func() { c.Close() })
	return c
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreePortNumber returns a loopback TCP port that was free a moment ago, or panics; for TestMain.
func FreePortNumber() int {
	p, err := freePort()
	if err != nil {
		panic(err)
	}
	return p
}

// StartReplica starts a redis-server replicating master and returns once its link is up and it
// holds master's data.
func StartReplica(t testing.TB, master *Redis, args ...string) *Redis {
	t.Helper()
	return StartReplicaVia(t, master, master.Addr, args...)
}

// StartReplicaVia is StartReplica with the replica dialling addr (a [Proxy] to master, say).
func StartReplicaVia(t testing.TB, master *Redis, addr string, args ...string) *Redis {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	// The master otherwise waits 5 s for more replicas before a diskless full sync.
	if err := master.Client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("configure master %s: %v", master.Addr, err)
	}
	r := StartRedis(t, append([]string{"--replicaof", host, port}, args...)...)
	c := r.Client()
	WaitFor(t, 30*time.Second, "replica of "+master.Addr+" in sync", func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1")
	})
	return r
}
