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

// A service publishes a job under its tenant and learns whether JetStream stored it; publishing
// the same id again adds nothing for as long as the fleet keeps the request (7 days by default),
// not only within JetStream's 2-minute duplicate window. An error names the id it is about: a
// publish whose ack was lost may have stored the job. A full jobs stream is ErrStreamFull:
// nothing was stored, and retrying later is safe.
func ExampleClient_Submit() {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: "acme"})
	if err != nil {
		panic(err)
	}
	req := job.Request{ID: "report-2026-12-02", Language: "python3", Code: "print(6*7)"}
	first, err := c.Submit(ctx, "default", req, nil)
	var je *runfleet.JobError
	if errors.As(err, &je) {
		fmt.Println("job", je.ID, "full:", errors.Is(err, runfleet.ErrStreamFull))
		return
	}
	again, err := c.Submit(ctx, "default", req, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(first.ID, "stored; duplicate:", first.Duplicate)
	fmt.Println(again.ID, "stored again; duplicate:", again.Duplicate)
	fmt.Println(c.Subjects().Job("default", "acme", first.ID))
	// Output:
	// report-2026-12-02 stored; duplicate: false
	// report-2026-12-02 stored again; duplicate: true
	// runfleet.jobs.default.acme.report-2026-12-02
}

// Submit checks what the protocol fixes before publishing: a request every worker would reject
// is refused with the same *job.RejectError, and nothing is stored.
func ExampleClient_Submit_validation() {
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
	_, err = c.Submit(ctx, "default", job.Request{Code: "print(1)"}, nil)
	var re *job.RejectError
	fmt.Println(errors.As(err, &re), re.Reason)
	// Output: true missing_language
}

// A service asks for a job's settlement without waiting for it: ErrNoSettlement while the job
// waits (here on a queue no worker consumes), ErrNotFound for an id the fleet never accepted.
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
	if _, err := c.Submit(ctx, "nobody-consumes", job.Request{ID: "nightly-1", Language: "python3", Code: "print(1)"}, nil); err != nil {
		panic(err)
	}
	_, err = c.Settlement(ctx, "nightly-1")
	fmt.Println(errors.Is(err, runfleet.ErrNoSettlement))
	_, err = c.Settlement(ctx, "nightly-never-sent")
	fmt.Println(errors.Is(err, runfleet.ErrNotFound))
	// Output:
	// true
	// true
}

// SubmitMany publishes a batch in about one round trip and says per job what happened: here one
// request is refused before anything is sent, and the others are stored.
func ExampleClient_SubmitMany() {
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
	reqs := []job.Request{
		{ID: "batch-1", Language: "python3", Code: "print(1)"},
		{ID: "batch-2", Code: "print(2)"},
		{ID: "batch-3", Language: "python3", Code: "print(3)"},
	}
	for _, r := range c.SubmitMany(ctx, "default", reqs, nil) {
		if r.Err != nil {
			fmt.Println(r.ID, "refused:", errors.Is(r.Err, runfleet.ErrQueueFull), r.Err)
			continue
		}
		fmt.Println(r.ID, "stored; duplicate:", r.Duplicate)
	}
	st, err := c.Watch(ctx, "batch-3", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("batch-3", st.Status)
	// Output:
	// batch-1 stored; duplicate: false
	// batch-2 refused: false job batch-2: rejected: missing_language: language is required
	// batch-3 stored; duplicate: false
	// batch-3 succeeded
}
