package docker_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/internal/profile"
	"github.com/runfleet/runfleet/internal/providers/docker"
	"github.com/runfleet/runfleet/internal/sandbox/providertest"
	"github.com/runfleet/runfleet/internal/testenv"
)

func image() string {
	if img := os.Getenv("RUNFLEET_TEST_IMAGE"); img != "" {
		return img
	}
	return "runfleet-sandbox:latest"
}

func TestConformance(t *testing.T) {
	ctx := t.Context()
	p, err := docker.New(ctx, docker.Options{Fleet: "runfleet-test"})
	if err != nil {
		testenv.Missing(t, "docker daemon: %v", err)
	}
	defer p.Close()
	profiles, err := p.Resolve(ctx, profile.Builtin("", image()))
	if err != nil {
		testenv.Missing(t, "sandbox image (make image): %v", err)
	}
	secret := "runfleet-secret-docker"
	t.Setenv("RUNFLEET_TEST_SECRET", secret)
	providertest.Run(t, providertest.Env{
		Provider: p,
		Profiles: profiles,
		Secret:   secret,
		Leftovers: func(t *testing.T, id string) string {
			out, _ := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "id="+id).Output()
			return strings.TrimSpace(string(out))
		},
	})
	if n, err := p.Reap(ctx, "providertest", 0, nil); err != nil || n != 0 {
		t.Errorf("Reap() = %d, %v; want nothing left to reap", n, err)
	}
}

// BenchmarkCycle: go test -bench Cycle -benchtime 20x ./internal/providers/docker/
func BenchmarkCycle(b *testing.B) {
	p, err := docker.New(b.Context(), docker.Options{Fleet: "runfleet-test"})
	if err != nil {
		testenv.Missing(b, "docker daemon: %v", err)
	}
	defer p.Close()
	profiles, err := p.Resolve(b.Context(), profile.Builtin("", image()))
	if err != nil {
		testenv.Missing(b, "sandbox image (make image): %v", err)
	}
	providertest.BenchCycle(b, providertest.Env{Provider: p, Profiles: profiles},
		[]string{"docker", "run", "--rm", "--network", "none", image(), "/usr/bin/python3", "-c", "pass"})
}
