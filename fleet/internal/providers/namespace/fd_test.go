package namespace_test

import (
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestInheritedFD: a descriptor the worker was started with reaches no program (G11).
func TestInheritedFD(t *testing.T) {
	testenv.NeedRoot(t)
	providertest.RunInheritedFD(t, "RUNFLEET_TEST_CGROUP=runfleet-test", "RUNFLEET_TEST_STATE="+t.TempDir(), "RUNFLEET_TEST_UID_LOCKS="+t.TempDir())
}
