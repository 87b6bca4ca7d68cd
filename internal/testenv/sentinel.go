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
