package runfleet_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// Cancel stops a running job, which settles cancelled. An id the fleet never accepted is
// ErrNotFound, and nothing is stored for it; a settled job is ErrSettled.
func ExampleClient_Cancel() {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{})
	if err != nil {
		panic(err)
	}
	sub, err := c.Submit(ctx, "default", job.Request{Language: "python3", Code: "import time\nprint('started', flush=True)\ntime.sleep(60)"}, nil)
	if err != nil {
		panic(err)
	}
	for _, err := range c.Pages(ctx, sub.ID) { // the first page: the program runs
		if err != nil {
			panic(err)
		}
		break
	}
	if err := c.Cancel(ctx, sub.ID); err != nil {
		panic(err)
	}
	st, err := c.Watch(ctx, sub.ID, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Status, st.Reason)
	fmt.Println(errors.Is(c.Cancel(ctx, sub.ID), runfleet.ErrSettled))
	fmt.Println(errors.Is(c.Cancel(ctx, "no-such-job"), runfleet.ErrNotFound))
	// Output:
	// cancelled cancel_request
	// true
	// true
}
