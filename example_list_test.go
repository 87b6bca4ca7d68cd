package runfleet_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// Jobs ranges over settled jobs, newest first, by status, queue, tenant and settle time — here the
// failed jobs of the last minute — and asks for the next page as the loop reaches it. A job is
// listed right after its settlement is stored, so a list made the moment Run returns may not show
// it yet.
func ExampleClient_Jobs() {
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
	st, _ := c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(4)"}, nil)
	q := job.ListQuery{Status: job.StatusFailed, Since: time.Now().Add(-time.Minute), Limit: 10}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for j, err := range c.Jobs(ctx, q) {
			if err != nil {
				panic(err)
			}
			if j.JobID == st.JobID {
				code, _ := j.Exit()
				fmt.Println(j.Status, j.Reason, code, j.Queue, j.Tenant)
				return
			}
		}
	}
	// Output:
	// failed exit_nonzero 4 default default
}

// ListJobs returns one page and the cursor of the next: what Jobs walks.
func ExampleClient_ListJobs() {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: "paged"})
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := c.Run(ctx, "default", job.Request{Language: "python3", Code: "print(1)"}, nil); err != nil {
			panic(err)
		}
	}
	q := job.ListQuery{Tenant: "paged", Limit: 2, Count: true}
	var page job.JobList
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if page, err = c.ListJobs(ctx, q); err != nil {
			panic(err)
		}
		if *page.Count >= 3 {
			break
		}
	}
	fmt.Println(len(page.Jobs), *page.Count, page.Cursor != "")
	// Output: 2 3 true
}
