package runfleet_test

import (
	"context"
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
