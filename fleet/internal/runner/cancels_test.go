package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestCancelsKeepEveryDelivery: a job delivered twice to one worker (a redelivery while the first
// delivery still runs) keeps both deliveries cancellable, whichever ends first.
func TestCancelsKeepEveryDelivery(t *testing.T) {
	var c cancels
	queued := time.Now()
	first, second := &attempt{tenant: "default", id: "j", meta: &jetstream.MsgMetadata{Timestamp: queued}}, &attempt{tenant: "default", id: "j", meta: &jetstream.MsgMetadata{Timestamp: queued}}
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
	c.cancel("default", "j", queued, errCancelled)
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

// TestCancelsSkipAJobStoredAfterTheCancel: a cancel stored before a job's message was for no job
// (a mistyped id, or an id reused later) and leaves the job running.
func TestCancelsSkipAJobStoredAfterTheCancel(t *testing.T) {
	var c cancels
	queued := time.Now()
	a := &attempt{tenant: "default", id: "j", meta: &jetstream.MsgMetadata{Timestamp: queued}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c.add(a, cancel)
	defer c.remove(a)
	c.cancel("default", "j", queued.Add(-time.Millisecond), errCancelled)
	if err := ctx.Err(); err != nil {
		t.Errorf("a cancel stored before the job cancelled it: %v", context.Cause(ctx))
	}
	c.cancel("acme", "j", queued.Add(time.Millisecond), errCancelled)
	if err := ctx.Err(); err != nil {
		t.Errorf("another tenant's cancel of the same id cancelled the job: %v", context.Cause(ctx))
	}
	c.cancel("default", "j", queued.Add(time.Millisecond), errCancelled)
	if !errors.Is(context.Cause(ctx), errCancelled) {
		t.Errorf("cause = %v after a cancel stored after the job, want errCancelled", context.Cause(ctx))
	}
}
