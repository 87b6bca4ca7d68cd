package runfleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runfleet/runfleet/job"
)

// ListJobs pages through settled jobs, newest first, by status, queue, tenant and settle time:
// here the failed jobs of the last minute.
func ExampleClient_ListJobs() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	st, _ := c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(4)"}, nil)
	q := job.ListQuery{Status: job.StatusFailed, Since: time.Now().Add(-time.Minute), Limit: 10}
	for {
		page, err := c.ListJobs(ctx, q)
		if err != nil {
			panic(err)
		}
		for _, j := range page.Jobs {
			if j.JobID == st.JobID {
				fmt.Println(j.Status, j.Reason, *j.ExitCode, j.Queue, j.Tenant)
			}
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	// Output:
	// failed exit_nonzero 4 default default
}
