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

// connect returns a client of the fleet at NATS_URL (`worker --dev` listens on nats.DefaultURL).
func connect(ctx context.Context) (*runfleet.Client, func()) {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{})
	if err != nil {
		panic(err)
	}
	return c, nc.Close
}

// A service publishes a job and learns whether JetStream stored it; publishing the same id again
// adds nothing.
func ExampleClient_Submit() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	req := job.Request{ID: "report-2026-12-02", Language: "python3", Code: "print(6*7)"}
	first, err := c.Submit(ctx, "default", req, nil)
	if err != nil {
		panic(err)
	}
	again, err := c.Submit(ctx, "default", req, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(first.ID, "stored; duplicate:", first.Duplicate)
	fmt.Println(again.ID, "stored again; duplicate:", again.Duplicate)
	// Output:
	// report-2026-12-02 stored; duplicate: false
	// report-2026-12-02 stored again; duplicate: true
}

// Submit checks what the protocol fixes before publishing: a request every worker would reject
// is refused with the same *job.RejectError, and nothing is stored.
func ExampleClient_Submit_validation() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	_, err := c.Submit(ctx, "default", job.Request{Code: "print(1)"}, nil)
	var re *job.RejectError
	fmt.Println(errors.As(err, &re), re.Reason)
	// Output: true missing_language
}

// A service asks for a job's settlement without waiting for it: ErrNoSettlement while the job
// waits (here on a queue no worker consumes), ErrNotFound for an id the fleet never accepted.
func ExampleClient_Settlement() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	if _, err := c.Submit(ctx, "nobody-consumes", job.Request{ID: "nightly-1", Language: "python3", Code: "print(1)"}, nil); err != nil {
		panic(err)
	}
	_, err := c.Settlement(ctx, "nightly-1")
	fmt.Println(errors.Is(err, runfleet.ErrNoSettlement))
	_, err = c.Settlement(ctx, "nightly-never-sent")
	fmt.Println(errors.Is(err, runfleet.ErrNotFound))
	// Output:
	// true
	// true
}
