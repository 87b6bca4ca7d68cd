package namespace_test

import (
	"go.uber.org/goleak"
	"path/filepath"
	"testing"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/providers/namespace"
	"github.com/runfleet/runfleet/internal/sandbox/providertest"
	"github.com/runfleet/runfleet/internal/testenv"
)

func TestMain(m *testing.M) {
	namespace.Init()
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	testenv.NeedRoot(t)
	secret := "runfleet-secret-" + t.Name()
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: t.TempDir()})
	if err != nil {
		testenv.Missing(t, "namespace provider: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() error = %v", err)
		}
	})
	providertest.Run(t, providertest.Env{
		Provider:      p,
		Profiles:      profile.Builtin(testenv.RootFS(t), ""),
		Secret:        secret,
		MeasuresUsage: true,
		Leftovers: func(t *testing.T, id string) string {
			for _, ctrl := range []string{"memory", "pids", "cpu"} {
				if m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctrl, "runfleet-test", "*", id)); len(m) > 0 {
					return "cgroup " + m[0]
				}
			}
			return ""
		},
	})
}

// BenchmarkCycle: go test -bench Cycle -benchtime 50x ./internal/providers/namespace/
func BenchmarkCycle(b *testing.B) {
	testenv.NeedRoot(b)
	p, err := namespace.New(namespace.Options{CgroupName: "runfleet-test", StateDir: b.TempDir()})
	if err != nil {
		testenv.Missing(b, "namespace provider: %v", err)
	}
	b.Cleanup(func() { _ = p.Close() })
	providertest.BenchCycle(b, providertest.Env{Provider: p, Profiles: profile.Builtin(testenv.RootFS(b), "")},
		[]string{"/usr/bin/python3", "-I", "-c", "pass"})
}
