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

// A service publishes a job and learns whether JetStream stored it; publishing the same id again
// adds nothing. NATS_URL names the fleet's NATS (`worker --dev` listens on nats.DefaultURL).
func ExampleClient_Submit() {
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
	req := job.Request{ID: "report-2026-12-02", Language: "python3", Code: "print(6*7)"}
	first, err := c.Submit(ctx, "default", req)
	if err != nil {
		panic(err)
	}
	again, err := c.Submit(ctx, "default", req)
	if err != nil {
		panic(err)
	}
	fmt.Println(first.ID, "stored; duplicate:", first.Duplicate)
	fmt.Println(again.ID, "stored again; duplicate:", again.Duplicate)
	// Output:
	// report-2026-12-02 stored; duplicate: false
	// report-2026-12-02 stored again; duplicate: true
}

// A service asks for a job's settlement without waiting for it: ErrNoSettlement while none is
// stored (here the job waits on a queue no worker consumes), the settlement's JSON once there is one.
func ExampleClient_Settlement() {
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
	if _, err := c.Submit(ctx, "nobody-consumes", job.Request{ID: "nightly-1", Language: "python3", Code: "print(1)"}); err != nil {
		panic(err)
	}
	_, err = c.Settlement(ctx, "nightly-1")
	fmt.Println(errors.Is(err, runfleet.ErrNoSettlement))
	// Output:
	// true
}
