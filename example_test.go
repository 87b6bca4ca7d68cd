package runfleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// A service publishes a job and learns whether JetStream stored it; publishing the same id again
// adds nothing. Here an embedded JetStream stands in for the fleet's NATS.
func ExampleClient_Submit() {
	dir, _ := os.MkdirTemp("", "runfleet-example-")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)

	nc, err := nats.Connect(ns.ClientURL())
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
// stored (here no worker runs), the settlement's JSON as stored once there is one.
func ExampleClient_Settlement() {
	dir, _ := os.MkdirTemp("", "runfleet-example-")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{})
	if err != nil {
		panic(err)
	}
	if _, err := c.Submit(ctx, "", job.Request{ID: "nightly-1", Language: "python3", Code: "print(1)"}); err != nil {
		panic(err)
	}
	_, err = c.Settlement(ctx, "nightly-1")
	fmt.Println(errors.Is(err, runfleet.ErrNoSettlement))
	// Output:
	// true
}
