package runfleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// ListJobs pages through settled jobs, newest first, by status, queue, tenant and settle time:
// here the failed jobs of the last minute. A job is listed right after its settlement is stored,
// so a list made the moment Run returns may not show it yet.
func ExampleClient_ListJobs() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	st, _ := c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(4)"}, nil)
	for deadline := time.Now().Add(10 * time.Second); !listed(ctx, c, st.JobID) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	// Output:
	// failed exit_nonzero 4 default default
}

// listed prints job id's row when the failed jobs of the last minute hold it.
func listed(ctx context.Context, c *runfleet.Client, id string) bool {
	q := job.ListQuery{Status: job.StatusFailed, Since: time.Now().Add(-time.Minute), Limit: 10}
	for {
		page, err := c.ListJobs(ctx, q)
		if err != nil {
			panic(err)
		}
		for _, j := range page.Jobs {
			if j.JobID == id {
				fmt.Println(j.Status, j.Reason, *j.ExitCode, j.Queue, j.Tenant)
				return true
			}
		}
		if page.Cursor == "" {
			return false
		}
		q.Cursor = page.Cursor
	}
}

// CountJobs counts what several filters select in one round trip: here a tenant's jobs of the last
// hour, and how many of them failed.
func ExampleClient_CountJobs() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	o := &runfleet.RunOptions{SubmitOptions: runfleet.SubmitOptions{Tenant: "counted"}}
	_, _ = c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(4)"}, o)
	_, _ = c.Run(ctx, "default", job.Request{Language: "python3", Code: "print('fine')"}, o)
	hour := time.Now().Add(-time.Hour)
	q := job.CountQuery{Queries: []job.ListQuery{
		{Tenant: "counted", Since: hour},
		{Tenant: "counted", Status: job.StatusFailed, Since: hour},
	}}
	var counts []int64
	// A job is counted right after its settlement is stored.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if counts, err = c.CountJobs(ctx, q); err != nil {
			panic(err)
		}
		if counts[0] == 2 {
			break
		}
	}
	fmt.Printf("%d jobs, %d failed\n", counts[0], counts[1])
	// Output:
	// 2 jobs, 1 failed
}
