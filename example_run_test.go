package runfleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// Run submits a job and waits for its settlement in one call; the output arrives through OnPage
// as the worker stores it. Limits are Go values, and a zero one is the worker's default.
func ExampleClient_Run() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	req := job.Request{Language: "python3", Code: "import sys; print(sys.stdin.read().upper())", Stdin: "hello",
		Limits: job.Limits{Timeout: 5 * time.Second, MemoryBytes: 128 << 20}}
	st, err := c.Run(ctx, "default", req, &runfleet.RunOptions{
		OnPage: func(p runfleet.Page) error {
			_, err := os.Stdout.Write(p.Data)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Status, *st.ExitCode)
	// Output:
	// HELLO
	// succeeded 0
}

// Like exec.Cmd.Run, Run returns an error when the job did not succeed: a *job.OutcomeError for a
// program that failed, timed out or was cancelled, with the settlement beside it.
func ExampleClient_Run_failure() {
	ctx := context.Background()
	c, closeConn := connect(ctx)
	defer closeConn()
	st, err := c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(3)"}, nil)
	var oe *job.OutcomeError
	if errors.As(err, &oe) {
		fmt.Println(oe.Status, oe.Reason, *st.ExitCode)
	}
	// Output: failed exit_nonzero 3
}
