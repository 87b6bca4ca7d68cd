package docker

import (
	"errors"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestCheckStatic: a dynamically linked executable is refused as the init, a static one taken.
func TestCheckStatic(t *testing.T) {
	static, err := testenv.DockerInit()
	if err != nil {
		t.Fatalf("static worker: %v", err)
	}
	if err := checkStatic(static); err != nil {
		t.Errorf("checkStatic(static worker) = %v, want nil", err)
	}
	if err := checkStatic("/usr/bin/python3"); !errors.Is(err, errDynamic) {
		t.Errorf("checkStatic(/usr/bin/python3) = %v, want %v", err, errDynamic)
	}
}
