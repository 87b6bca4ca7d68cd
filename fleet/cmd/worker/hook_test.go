//go:build !faults

package main

import (
	"io"
	"testing"
)

// TestProductionBuildHasNoFaultHooks: --crash-at exists only in `-tags faults` builds.
func TestProductionBuildHasNoFaultHooks(t *testing.T) {
	fs, c := flags(io.Discard)
	if fs.Lookup("crash-at") != nil {
		t.Error("the production build has a --crash-at flag")
	}
	if c.hook() != nil {
		t.Error("the production build has a fault hook")
	}
}
