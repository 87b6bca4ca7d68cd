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
	"github.com/runfleet/runfleet/protocol"
)

// An operator's tool makes the fleet's streams before any worker has run, with its own bounds:
// a stream that exists keeps its settings but for its replicas, raised, and the jobs stream's
// retention and size, when set. A service that only submits needs none of this, and its NATS
// user may be refused it.
func ExampleInspector() {
	ctx := context.Background()
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{})
	if err != nil {
		panic(err)
	}
	if err := in.EnsureStreams(ctx, protocol.StreamOptions{Retention: 7 * 24 * time.Hour}); err != nil {
		panic(err)
	}
	fmt.Println("streams ready:", in.Subjects().JobsStream())
	// Output:
	// streams ready: RUNFLEET_JOBS
}

// CountJobs counts what several filters select in one round trip: here a tenant's jobs of the last
// hour, and how many of them failed.
func ExampleInspector_CountJobs() {
	ctx := context.Background()
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: "counted"})
	if err != nil {
		panic(err)
	}
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{})
	if err != nil {
		panic(err)
	}
	_, _ = c.Run(ctx, "default", job.Request{Language: "python3", Code: "import sys; sys.exit(4)"}, nil)
	_, _ = c.Run(ctx, "default", job.Request{Language: "python3", Code: "print('fine')"}, nil)
	hour := time.Now().Add(-time.Hour)
	q := job.CountQuery{Queries: []job.ListQuery{
		{Tenant: "counted", Since: hour},
		{Tenant: "counted", Status: job.StatusFailed, Since: hour},
	}}
	var counts []int64
	// A job is counted right after its settlement is stored.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if counts, err = in.CountJobs(ctx, q); err != nil {
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

// TenantUsage says what a tenant holds of the fleet's storage, as the workers count it, against
// its policy's max_kept_bytes, max_jobs_kept and max_artifact_bytes.
func ExampleInspector_TenantUsage() {
	ctx := context.Background()
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: "measured"})
	if err != nil {
		panic(err)
	}
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{})
	if err != nil {
		panic(err)
	}
	_, _ = c.Run(ctx, "default", job.Request{Language: "python3", Code: "print('kept')"}, nil)
	var u protocol.TenantUsage
	// A job is counted right after its settlement is stored.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if u, err = in.TenantUsage(ctx, "measured"); err != nil {
			panic(err)
		}
		if u.JobsKept == 1 {
			break
		}
	}
	fmt.Printf("%d job kept, its request counted: %v\n", u.JobsKept, u.KeptBytes > 0)
	// Output:
	// 1 job kept, its request counted: true
}

// A job is its tenant and its id: two tenants may use one id, and their jobs never meet. The
// operator finds which tenants hold an id, and reads each one's job through a client of that
// tenant.
func ExampleInspector_Tenant() {
	ctx := context.Background()
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	id := "invoice-" + job.NewID()
	for _, tenant := range []string{"north", "south"} {
		c, err := runfleet.NewClient(ctx, nc, runfleet.Options{Tenant: tenant})
		if err != nil {
			panic(err)
		}
		if _, err := c.Run(ctx, "default", job.Request{ID: id, Language: "python3", Code: "print('" + tenant + "')"}, nil); err != nil {
			panic(err)
		}
	}
	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{})
	if err != nil {
		panic(err)
	}
	tenants, err := in.Tenants(ctx, id)
	if err != nil {
		panic(err)
	}
	for _, tenant := range tenants {
		c, err := in.Tenant(tenant)
		if err != nil {
			panic(err)
		}
		st, err := c.Settlement(ctx, id)
		if err != nil {
			panic(err)
		}
		fmt.Println(tenant, st.Status, st.StdoutBytes)
	}
	// Output:
	// north succeeded 6
	// south succeeded 6
}
