package uidlock_test

import (
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/sandbox/uidlock"
)

// TestTakeExcludes: two ranges on one lock directory (two worker processes, or two providers)
// never hand out one uid at once; a released uid is taken again, and a full range says so.
func TestTakeExcludes(t *testing.T) {
	dir := t.TempDir()
	a, b := uidlock.New(500000, 2, dir), uidlock.New(500000, 2, dir)
	ua, _, err := a.Take()
	if err != nil {
		t.Fatal(err)
	}
	ub, _, err := b.Take()
	if err != nil {
		t.Fatal(err)
	}
	if ua == ub {
		t.Fatalf("Take() = %d in both ranges, want two uids", ua)
	}
	if got, _, err := a.Take(); err == nil {
		t.Fatalf("Take() of a full range = %d, want an error", got)
	}
	b.Release(ub)
	if got, _, err := a.Take(); err != nil || got != ub {
		t.Errorf("Take() after Release(%d) = %d, %v; want %d", ub, got, err, ub)
	}
}
