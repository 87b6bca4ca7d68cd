package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// reapFleet keeps this test's containers apart from the other tests' reapers.
const reapFleet = "runfleet-test-reap"

func newReaper(t *testing.T, worker string, lifetime time.Duration) (*docker.Provider, profile.Set) {
	t.Helper()
	return newProviderWith(t, docker.Options{Fleet: reapFleet, Worker: worker, Lifetime: lifetime})
}

// TestReapByOwnDeadline: workers with different settings share a daemon. One whose containers
// live briefly never reaps another's live container by its own settings, only a container past
// the deadline that container's worker wrote on it.
func TestReapByOwnDeadline(t *testing.T) {
	long, profiles := newReaper(t, "long", time.Hour)
	gone, _ := newReaper(t, "gone", 2*time.Second)
	short, _ := newReaper(t, "short", 2*time.Second)
	create := func(p *docker.Provider) sandbox.Sandbox {
		sb, err := p.Create(t.Context(), providertest.Shape(profiles["python3"]))
		if err != nil {
			t.Fatalf("Create() error = %v", err)
		}
		t.Cleanup(func() { sb.Destroy(context.WithoutCancel(t.Context())) })
		return sb
	}
	kept := create(long)
	expired := create(gone) // its worker is alive but lets it outlive its own deadline
	testenv.WaitFor(t, time.Minute, "the expired container reaped", func() bool {
		if _, err := short.Reap(t.Context()); err != nil {
			t.Fatalf("Reap() error = %v", err)
		}
		return containerLeft(t, expired.ID()) == ""
	})
	if containerLeft(t, kept.ID()) == "" {
		t.Errorf("a live container whose deadline is an hour away was reaped")
	}
}
