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

// Watch replays a job's pages from the start and follows it live until it settles; a watcher
// started after the job ended gets the same pages and settlement at once.
func ExampleClient_Watch() {
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
	sub, err := c.Submit(ctx, "default", job.Request{Language: "nodejs", Code: "console.log('one'); console.error('two')"}, nil)
	if err != nil {
		panic(err)
	}
	st, err := c.Watch(ctx, sub.ID, func(p runfleet.Page) error {
		fmt.Printf("%s: %s", p.Stream, p.Data)
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Status, st.StdoutBytes, st.StderrBytes)
	// Unordered output:
	// stdout: one
	// stderr: two
	// succeeded 4 4
}

// Pages is the same watch as an iterator; the settlement is then read with Settlement.
func ExampleClient_Pages() {
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
	sub, err := c.Submit(ctx, "default", job.Request{Language: "python3", Code: "for i in range(3): print(i, flush=True)"}, nil)
	if err != nil {
		panic(err)
	}
	var out []byte
	for p, err := range c.Pages(ctx, sub.ID) {
		if err != nil {
			panic(err)
		}
		out = append(out, p.Data...)
	}
	st, err := c.Settlement(ctx, sub.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q %s\n", out, st.Status)
	// Output: "0\n1\n2\n" succeeded
}

// Watch never waits for a job the fleet does not know, and a watch that ctx ends says so in a
// way both errors.Is checks see.
func ExampleClient_Watch_errors() {
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
	_, err = c.Watch(ctx, "no-such-job", nil)
	fmt.Println(errors.Is(err, runfleet.ErrNotFound))

	if _, err := c.Submit(ctx, "nobody-consumes", job.Request{ID: "waits-forever", Language: "python3", Code: "print(1)"}, nil); err != nil {
		panic(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Watch(short, "waits-forever", nil)
	fmt.Println(errors.Is(err, runfleet.ErrNoSettlement), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true
	// true true
}
