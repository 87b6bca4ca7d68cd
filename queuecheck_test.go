package runfleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// TestSubmitQueueFull: a tenant whose policy sets max_queued gets ErrQueueFull once that many of
// its jobs wait, with nothing published; a fleet without a tenants bucket limits nothing; a
// tenant without an entry takes the default entry's bound, and so does one whose entry does not
// decode (protocol.TenantPolicy's rule); SkipQueueCheck and Inspector.SubmitRaw publish regardless.
// The fleet here is streams of a prefix of the test's own and a tenant consumer made as the
// workers make it, which nothing consumes, so that what waits stays waiting.
func TestSubmitQueueFull(t *testing.T) {
	nc := dial(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := job.NewSubjects("qfull")
	if err != nil {
		t.Fatal(err)
	}
	if err := runfleet.EnsureStreams(ctx, js, s, runfleet.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "beta", "gamma"} {
		// As internal/queue's TenantConsumer makes it: the client finds it by its metadata.
		if _, err := js.CreateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
			Durable:       s.TenantConsumer("default", tenant),
			FilterSubject: s.TenantJobs("default", tenant),
			AckPolicy:     jetstream.AckExplicitPolicy,
			Metadata:      map[string]string{"runfleet.queue": "default", "runfleet.tenant": tenant},
		}); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(c *runfleet.Client, tenant string) error {
		_, err := c.Submit(ctx, "default", job.Request{Language: "python3", Code: "print(1)"}, &runfleet.SubmitOptions{Tenant: tenant})
		return err
	}
	acme, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: "qfull", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(acme, "acme"); err != nil {
		t.Fatalf("Submit() without a tenants bucket: %v, want it stored", err)
	}

	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.TenantsBucket()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "acme", []byte(`{"max_queued": 3, "weight": 2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "default", []byte(`{"max_queued": 1}`)); err != nil {
		t.Fatal(err)
	}
	// A misspelt bound: the entry does not decode, so gamma takes the default's.
	if _, err := kv.Put(ctx, "gamma", []byte(`{"max_queued": 5, "max_queue": 5}`)); err != nil {
		t.Fatal(err)
	}
	// A new client reads the policy now; the one above would within its TTL.
	acme, err = runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: "qfull", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := submit(acme, ""); err != nil {
			t.Fatalf("Submit() %d of acme under max_queued 3: %v", i+2, err)
		}
	}
	err = submit(acme, "")
	var full *runfleet.QueueFullError
	if !errors.Is(err, runfleet.ErrQueueFull) || !errors.As(err, &full) || *full != (runfleet.QueueFullError{Tenant: "acme", Queued: 3, MaxQueued: 3}) {
		t.Errorf("Submit() past max_queued = %v, want ErrQueueFull for acme, 3 of 3", err)
	}
	var je *runfleet.JobError
	if !errors.As(err, &je) || je.ID == "" {
		t.Errorf("Submit() past max_queued = %v, want a *JobError naming the id", err)
	}

	if err := submit(acme, "beta"); err != nil {
		t.Errorf("Submit() of beta's first job under the default's max_queued 1: %v", err)
	}
	if err := submit(acme, "beta"); !errors.Is(err, runfleet.ErrQueueFull) {
		t.Errorf("Submit() of beta's second job = %v, want ErrQueueFull (the default's bound)", err)
	}

	if err := submit(acme, "gamma"); err != nil {
		t.Errorf("Submit() of gamma's first job under the default's max_queued 1: %v", err)
	}
	if err := submit(acme, "gamma"); !errors.Is(err, runfleet.ErrQueueFull) {
		t.Errorf("Submit() of gamma's second job = %v, want ErrQueueFull (its entry does not decode: the default's bound)", err)
	}

	in, err := runfleet.NewInspector(nc, runfleet.InspectorOptions{Prefix: "qfull"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.SubmitRaw(ctx, "", job.NewID(), []byte(`{"language":"python3","code":"print(1)"}`), &runfleet.SubmitOptions{Tenant: "acme"}); err != nil {
		t.Errorf("Inspector.SubmitRaw() past max_queued: %v, want it stored (it checks nothing)", err)
	}

	skip, err := runfleet.NewClient(ctx, nc, runfleet.Options{Prefix: "qfull", Tenant: "acme", SkipQueueCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(skip, ""); err != nil {
		t.Errorf("Submit() with SkipQueueCheck: %v, want it stored", err)
	}
	stream, err := js.Stream(ctx, s.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]uint64{"acme": 5, "beta": 1, "gamma": 1} {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(s.TenantJobs("default", tenant)))
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		for _, n := range info.State.Subjects {
			got += n
		}
		if got != want {
			t.Errorf("jobs stored of %s = %d, want %d (nothing of a refused job)", tenant, got, want)
		}
	}
}

// A service whose tenant has a max_queued learns it is reached before anything is published,
// with whose queue and how full; nothing was stored, and retrying later is safe. The check is
// advisory: see ErrQueueFull.
func ExampleQueueFullError() {
	err := error(&runfleet.JobError{ID: "nightly-7", Err: &runfleet.QueueFullError{Tenant: "acme", Queued: 100, MaxQueued: 100}})
	var full *runfleet.QueueFullError
	if errors.Is(err, runfleet.ErrQueueFull) && errors.As(err, &full) {
		fmt.Println("retry later:", full.Tenant, full.Queued, "of", full.MaxQueued)
	}
	fmt.Println(err)
	// Output:
	// retry later: acme 100 of 100
	// job nightly-7: tenant acme has 100 jobs queued, its max_queued is 100: tenant queue full
}
