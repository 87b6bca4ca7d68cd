// Package testenv starts the real services tests run against — a redis-server child process on a
// free loopback port and an embedded JetStream server in a temporary directory — and decides what
// a missing part means: outside CI the test is skipped with what is missing; with CI=true it fails.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped for want of a service.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t outside CI and fails it in CI, saying what is missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("missing in CI: %s", msg)
	}
	t.Skipf("missing: %s (set up with `make test`)", msg)
}

// NeedRoot requires root, which the namespace provider needs for cgroups and uid switching.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (the namespace provider makes cgroups and switches uids)")
	}
}

// RootFS is the Debian root file system sandboxes run in when RUNFLEET_TEST_ROOTFS names one (as
// `make test` does), or "" for the host's /usr.
func RootFS(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RUNFLEET_TEST_ROOTFS")
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(dir + "/usr/bin/python3"); err != nil {
		Missing(t, "root fs %s with python3: %v", dir, err)
	}
	return dir
}
