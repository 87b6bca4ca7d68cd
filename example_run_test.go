package runfleet_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// Run submits a job and waits for its settlement in one call; the output arrives through OnPage
// as the worker stores it. Limits are Go values, and a zero one is the worker's default.
func ExampleClient_Run() {
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
	code, _ := st.Exit()
	fmt.Println(st.Status, code)
	// Output:
	// HELLO
	// succeeded 0
}

// Output is Run that returns what the job wrote, stdout and stderr apart, with its settlement, as
// exec.Cmd.Output does. When the job did not succeed the output is returned beside the error.
func ExampleClient_Output() {
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
	res, err := c.Output(ctx, "default", job.Request{Language: "python3",
		Code: "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\nsys.exit(2)"}, nil)
	code, exited := res.Settlement.Exit()
	fmt.Printf("%q %q\n", res.Stdout, res.Stderr)
	fmt.Println(res.Settlement.Status, code, exited)
	var je *runfleet.JobError
	fmt.Println(errors.As(err, &je) && je.ID == res.Settlement.JobID)
	// Output:
	// "to stdout\n" "to stderr\n"
	// failed 2 true
	// true
}

// Like exec.Cmd.Run, Run returns an error when the job did not succeed: a *runfleet.JobError
// around a *job.OutcomeError for a program that failed, timed out or was cancelled (a
// *job.RejectError for a request the worker refused), with the settlement beside it.
func ExampleClient_Run_failure() {
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
	st, err := c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(3)"}, nil)
	var oe *job.OutcomeError
	if errors.As(err, &oe) {
		code, _ := oe.Exit()
		fmt.Println(oe.Status, oe.Reason, code, st.JobID == oe.JobID)
	}
	// Output: failed exit_nonzero 3 true
}
