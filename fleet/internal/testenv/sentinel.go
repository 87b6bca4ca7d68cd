package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel runs a Sentinel (Debian's redis-server in sentinel mode, quorum 1) that watches
// master under name, authenticating with password when it is not empty, and returns its address
// once it names that master.
func StartSentinel(t testing.TB, master *Redis, name, password string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server on PATH (Debian package redis-server)")
	}
	host, port, _ := strings.Cut(master.Addr, ":")
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n", addr[len("127.0.0.1:"):], dir, name, host, port)
	if password != "" {
		text += fmt.Sprintf("sentinel auth-pass %s %s\n", name, password)
	}
	// Sentinel rewrites its configuration file, so it must be a writable file of its own.
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sentinel: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	WaitFor(t, 30*time.Second, "the Sentinel names the master", func() bool {
		got, err := s.GetMasterAddrByName(t.Context(), name).Result()
		return err == nil && len(got) == 2 && got[1] == port
	})
	return addr
}

// StartSentinels runs n Sentinels (quorum n/2+1) watching master under name: the master is down
// after downAfter of silence, and failoverTimeout is Sentinel's failover-timeout (a failed
// failover is retried after twice that; a replica that follows another address than the
// master's, through a proxy say, is pointed at the master after it). It returns their addresses
// once every one names the master and knows the others.
func StartSentinels(t testing.TB, master *Redis, name string, n int, downAfter, failoverTimeout time.Duration) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server on PATH (Debian package redis-server)")
	}
	host, port, _ := strings.Cut(master.Addr, ":")
	var addrs []string
	for range n {
		dir := t.TempDir()
		p := strconv.Itoa(FreePort(t))
		text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %[3]s %[7]d\nsentinel failover-timeout %[3]s %[8]d\n",
			p, dir, name, host, port, n/2+1, downAfter.Milliseconds(), failoverTimeout.Milliseconds())
		conf := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+p)
	}
	for _, addr := range addrs {
		s := redis.NewSentinelClient(&redis.Options{Addr: addr})
		WaitFor(t, 60*time.Second, "Sentinel "+addr+" knows the master, its replicas and the other Sentinels", func() bool {
			got, err := s.GetMasterAddrByName(t.Context(), name).Result()
			if err != nil || len(got) != 2 || got[1] != port {
				return false
			}
			m, err := s.Master(t.Context(), name).Result()
			return err == nil && m["num-other-sentinels"] == strconv.Itoa(n-1)
		})
		s.Close()
	}
	return addrs
}

// SentinelMaster is the address Sentinel at addr gives for master name.
func SentinelMaster(t testing.TB, addr, name string) string {
	t.Helper()
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	got, err := s.GetMasterAddrByName(t.Context(), name).Result()
	if err != nil || len(got) != 2 {
		return ""
	}
	return got[0] + ":" + got[1]
}
