package runner

import (
	"context"
	"errors"
	"testing"
)

// TestCancelsKeepEveryDelivery: a job delivered twice to one worker (a redelivery while the first
// delivery still runs) keeps both deliveries cancellable, whichever ends first.
func TestCancelsKeepEveryDelivery(t *testing.T) {
	var c cancels
	first, second := &attempt{id: "j"}, &attempt{id: "j"}
	ctx1, cancel1 := context.WithCancelCause(context.Background())
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel1(nil)
	defer cancel2(nil)
	c.add(first, cancel1)
	c.add(second, cancel2)
	c.remove(second) // the redelivery ends first
	if got := c.len(); got != 1 {
		t.Fatalf("len() = %d after one of two deliveries ended, want 1", got)
	}
	c.cancel("j", errCancelled)
	if !errors.Is(context.Cause(ctx1), errCancelled) {
		t.Errorf("first delivery's cause = %v, want errCancelled", context.Cause(ctx1))
	}
	if ctx2.Err() != nil {
		t.Errorf("the ended delivery was cancelled again")
	}
	c.remove(first)
	if got := c.len(); got != 0 {
		t.Errorf("len() = %d, want 0", got)
	}
}
